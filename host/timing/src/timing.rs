//! When a schedule fires: a [`Timing`] is a cron expression read in an IANA time zone, a fixed
//! interval, or one instant, and answers one question — [`Timing::next_after`].
//!
//! # Daylight saving time
//!
//! A cron expression matches *wall-clock* times in its zone: `0 9 * * *` in `Europe/Berlin` is
//! 09:00 in Berlin, summer and winter. Twice a year the wall clock does not map one-to-one to
//! instants, and this module decides:
//!
//! - **Spring forward** — a wall time that does not exist (02:30 on 2026-03-08 in
//!   `America/New_York`) fires at the first instant after the gap (03:00 EDT). Several ticks
//!   inside one gap (`*/15 * * * *`) collapse into that one fire. A daily job is never lost and
//!   nothing fires twice.
//! - **Fall back** — a wall time that exists twice (01:30 on 2026-11-01 in New York) fires once,
//!   at its first occurrence (01:30 EDT); the repeated hour fires nothing. So `*/15 * * * *`
//!   pauses for 75 minutes that night: a schedule that must keep a fixed period uses
//!   `interval`, which counts elapsed time and knows no zones.
//!
//! # Missed ticks
//!
//! A tick missed while the host was down fires once at start, however many were missed:
//! [`Timing::latest_missed`] says whether one was (the latest), and the host then fires once
//! and arms [`Timing::next_after`] *now*, never the ticks in between. A running host that
//! falls behind (it fires a tick after the next came due) fires the latest tick it missed
//! next, the same way: behind by less than a period, it loses none; behind by many, it fires
//! once for them all, as after a downtime.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use crate::error::{Error, Result};

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// On every match of a five-field cron expression, read in a time zone.
    Cron(Cron),
    /// Every period, on a grid through an anchor instant.
    Interval(Interval),
    /// Once.
    At {
        /// The instant, epoch ms.
        at_ms: i64,
    },
}

impl Timing {
    /// The timing of a schedule manifest's `cron` + `timezone`, `interval` or `at`: exactly one
    /// of the three must be given. `timezone` (UTC when absent) applies to `cron` only, but a
    /// name outside the IANA database is refused whichever is given. An `interval` is anchored
    /// at the Unix epoch, so `15m` fires at :00, :15, :30 and :45 UTC, the same grid across
    /// restarts without storing anything.
    pub fn from_parts(
        cron: Option<&str>,
        timezone: Option<&str>,
        interval: Option<Duration>,
        at: Option<&str>,
    ) -> Result<Timing> {
        let tz = timezone.map(parse_tz).transpose()?.unwrap_or(Tz::UTC);
        match (cron, interval, at) {
            (Some(expr), None, None) => Ok(Timing::Cron(Cron::new(expr, tz)?)),
            (None, Some(every), None) => Ok(Timing::Interval(Interval::new(every, 0)?)),
            (None, None, Some(at)) => Ok(Timing::At {
                at_ms: parse_rfc3339(at)?,
            }),
            (None, None, None) => Err(Error::NoTiming),
            _ => Err(Error::SeveralTimings(
                [
                    ("cron", cron.is_some()),
                    ("interval", interval.is_some()),
                    ("at", at.is_some()),
                ]
                .into_iter()
                .filter_map(|(name, given)| given.then_some(name))
                .collect(),
            )),
        }
    }

    /// The first fire strictly after `after_ms` (epoch ms), or `None` when there is none: an
    /// `at` that has passed, a cron expression that never matches again (`0 0 31 2 *`).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Timing::Cron(cron) => cron.next_after(after_ms),
            Timing::Interval(interval) => interval.next_after(after_ms),
            Timing::At { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
        }
    }

    /// The first tick in `(last_ms, now_ms]`: one the host missed if it last fired (or, never
    /// having fired, was created) at `last_ms` and starts at `now_ms`. The host fires it once
    /// and arms `next_after(now_ms)`, so a downtime that spans many ticks still fires once.
    pub fn missed(&self, last_ms: i64, now_ms: i64) -> Option<i64> {
        self.next_after(last_ms).filter(|&due| due <= now_ms)
    }

    /// The latest tick in `(last_ms, now_ms]`: the one a running host fires for all the
    /// ticks after `last_ms` (the one it just fired) that came due while it ran behind, so
    /// that falling behind by less than a period loses no tick and falling behind by many
    /// fires once, as a downtime does. A cron expression is walked a tick at a time, at most
    /// 2,880 of them (two days of minute ticks): beyond, the tick reached.
    pub fn latest_missed(&self, last_ms: i64, now_ms: i64) -> Option<i64> {
        let first = self.missed(last_ms, now_ms)?;
        match self {
            Timing::Interval(interval) => interval
                .next_after(now_ms)
                .map(|next| next - interval.every_ms),
            Timing::Cron(_) | Timing::At { .. } => {
                let mut latest = first;
                for _ in 0..MAX_CAUGHT_UP {
                    match self.missed(latest, now_ms) {
                        Some(later) => latest = later,
                        None => break,
                    }
                }
                Some(latest)
            }
        }
    }
}

/// How many ticks of a cron expression [`Timing::latest_missed`] walks over at most.
const MAX_CAUGHT_UP: usize = 2 * 1_440;

/// A five-field cron expression (minute hour day-of-month month day-of-week, as the manifest
/// validator accepts it), parsed once, and the IANA zone it is read in.
#[derive(Debug, Clone, PartialEq)]
pub struct Cron {
    expr: String,
    tz: Tz,
    /// Shared: croner's parsed pattern is 344 bytes inline and some 5 KB on the heap (it keeps
    /// a table of the years 1–5000), so clones of a timing share one.
    pattern: Arc<croner::Cron>,
}

/// How many matching wall times [`Cron::next_after`] may pass over before giving up. A match
/// can only fall at or before the search start inside a fall-back overlap, where the wall clock
/// runs back; no zone in the tz database has run back more than a day, which holds at most
/// 1,440 minute matches.
const MAX_PASSED_OVER: usize = 2 * 1_440;

impl Cron {
    /// Parses `expr`, which must have exactly five fields.
    pub fn new(expr: &str, tz: Tz) -> Result<Cron> {
        let bad = |reason: String| Error::BadCron {
            expr: expr.to_owned(),
            reason,
        };
        let fields = expr.split_whitespace().count();
        if fields != 5 {
            return Err(bad(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {fields}"
            )));
        }
        let pattern = croner::Cron::from_str(expr).map_err(|e| bad(e.to_string()))?;
        Ok(Cron {
            expr: expr.to_owned(),
            tz,
            pattern: Arc::new(pattern),
        })
    }

    /// The expression as written.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The zone the expression is read in.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// The first fire strictly after `after_ms`, with the daylight-saving rules of the
    /// [module docs](self).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after = DateTime::from_timestamp_millis(after_ms)?;
        // croner searches naive wall times (given as UTC, so it applies no zone rules of its
        // own); its matches are whole minutes, so the fraction of a second can go.
        let mut wall = after
            .with_timezone(&self.tz)
            .naive_local()
            .with_nanosecond(0)?;
        for _ in 0..MAX_PASSED_OVER {
            wall = self
                .pattern
                .find_next_occurrence(&wall.and_utc(), false)
                .ok()?
                .naive_utc();
            let fire = self.instant(wall)?;
            if fire > after {
                return Some(fire.timestamp_millis());
            }
        }
        None
    }

    /// The instant a matching wall time fires at: its only one, its first in a fall-back
    /// overlap, the end of the gap in a spring-forward.
    fn instant(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.tz.from_local_datetime(&wall) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t.to_utc()),
            LocalResult::None => gap_end(self.tz, wall),
        }
    }
}

/// The first instant whose wall time in `tz` is at or after `wall`, a wall time that a
/// spring-forward skipped: the end of that gap.
fn gap_end(tz: Tz, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    /// No UTC offset reaches a day, so two days either side of `wall` read as UTC bracket it.
    const BRACKET_SECS: i64 = 2 * 86_400;
    let wall_at =
        |secs| DateTime::from_timestamp(secs, 0).map(|t| t.with_timezone(&tz).naive_local());
    let probe = wall.and_utc().timestamp();
    let (mut before, mut at_or_after) = (probe - BRACKET_SECS, probe + BRACKET_SECS);
    // The wall clock is below `wall` at `before` and at or above it at `at_or_after`; the one
    // place between where it crosses `wall` is the jump over the gap.
    while at_or_after - before > 1 {
        let mid = before + (at_or_after - before) / 2;
        if wall_at(mid)? >= wall {
            at_or_after = mid;
        } else {
            before = mid;
        }
    }
    DateTime::from_timestamp(at_or_after, 0)
}

/// A fixed period: fires at `anchor_ms + k × every` for every integer `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    every_ms: i64,
    anchor_ms: i64,
}

impl Interval {
    /// A period of `every` (at least 1 ms) through `anchor_ms`, which only sets the phase: the
    /// grid extends both ways.
    pub fn new(every: Duration, anchor_ms: i64) -> Result<Interval> {
        let every_ms = i64::try_from(every.as_millis())
            .ok()
            .filter(|&ms| ms > 0)
            .ok_or(Error::BadInterval(every))?;
        Ok(Interval {
            every_ms,
            anchor_ms,
        })
    }

    /// The period.
    pub fn every(&self) -> Duration {
        Duration::from_millis(self.every_ms.unsigned_abs())
    }

    /// The instant that sets the phase, epoch ms.
    pub fn anchor_ms(&self) -> i64 {
        self.anchor_ms
    }

    /// The first grid point strictly after `after_ms`.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let (every, anchor) = (i128::from(self.every_ms), i128::from(self.anchor_ms));
        let periods = (i128::from(after_ms) - anchor).div_euclid(every) + 1;
        i64::try_from(anchor + periods * every).ok()
    }
}

/// An IANA zone name.
pub(crate) fn parse_tz(name: &str) -> Result<Tz> {
    Tz::from_str(name).map_err(|_| Error::UnknownTimeZone {
        name: name.to_owned(),
        suggestion: chrono_tz::TZ_VARIANTS
            .iter()
            .map(|tz| tz.name())
            .find(|known| known.eq_ignore_ascii_case(name)),
    })
}

/// An RFC 3339 instant, epoch ms.
pub(crate) fn parse_rfc3339(text: &str) -> Result<i64> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|_| Error::BadAt(text.to_owned()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on a bad fixture

    use super::*;

    fn ms(text: &str) -> i64 {
        parse_rfc3339(text).unwrap()
    }

    #[test]
    fn interval_grid_extends_before_its_anchor() {
        let every = Interval::new(Duration::from_secs(10), 1_005).unwrap();
        assert_eq!(every.next_after(1_005), Some(11_005));
        assert_eq!(every.next_after(1_004), Some(1_005));
        assert_eq!(every.next_after(-20_000), Some(-18_995));
    }

    #[test]
    fn interval_at_the_edge_of_time_has_no_next() {
        let every = Interval::new(Duration::from_millis(10), 0).unwrap();
        assert_eq!(every.next_after(i64::MAX - 1), None);
    }

    #[test]
    fn a_host_behind_fires_the_latest_tick_it_missed_once() {
        let every = Timing::Interval(Interval::new(Duration::from_secs(1), 0).unwrap());
        // Fired 10 s; the next is not due yet, or due, or two are (the later fires).
        assert_eq!(every.latest_missed(10_000, 10_999), None);
        assert_eq!(every.latest_missed(10_000, 11_200), Some(11_000));
        assert_eq!(every.latest_missed(10_000, 12_050), Some(12_000));
        let cron = Timing::Cron(Cron::new("* * * * *", Tz::UTC).unwrap());
        let base = ms("2026-06-01T12:00:00Z");
        assert_eq!(cron.latest_missed(base, base + 59_000), None);
        assert_eq!(cron.latest_missed(base, base + 61_000), Some(base + 60_000));
        assert_eq!(
            cron.latest_missed(base, base + 3 * 60_000 + 5),
            Some(base + 3 * 60_000)
        );
        let once = Timing::At { at_ms: base };
        assert_eq!(once.latest_missed(base, base + 1), None);
    }

    #[test]
    fn zero_interval_is_refused() {
        assert_eq!(
            Interval::new(Duration::ZERO, 0),
            Err(Error::BadInterval(Duration::ZERO))
        );
        assert!(Interval::new(Duration::from_micros(500), 0).is_err());
    }

    #[test]
    fn cron_ignores_the_fraction_of_a_second() {
        let cron = Cron::new("* * * * *", Tz::UTC).unwrap();
        let base = ms("2026-06-01T12:00:00Z");
        assert_eq!(cron.next_after(base + 500), Some(base + 60_000));
        assert_eq!(cron.next_after(base - 1), Some(base));
    }

    #[test]
    fn gap_end_finds_the_transition() {
        let wall = NaiveDateTime::parse_from_str("2026-03-29 02:30", "%Y-%m-%d %H:%M").unwrap();
        let end = gap_end(chrono_tz::Europe::Berlin, wall).unwrap();
        assert_eq!(end.timestamp_millis(), ms("2026-03-29T03:00:00+02:00"));
    }

    #[test]
    fn timezone_differing_in_case_is_suggested() {
        let err = parse_tz("europe/berlin").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown time zone `europe/berlin` (use an IANA name such as `Europe/Berlin`); did you mean `Europe/Berlin`?"
        );
    }
}
