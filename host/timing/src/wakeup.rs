//! Self-scheduled wakeups: the `when` of the `request_wakeup` host tool, turned into a
//! [`Timing`] and checked against the host's `policy.max_wakeup_horizon`.
//!
//! The tool's shape (from the triggers page):
//! `when: {kind: "delay_ms", value: 300000} | {kind: "cron", value: "*/5 * * * *"} |
//! {kind: "at", value: "2026-06-01T12:00:00Z"}`. Decoding that JSON is the caller's; this module
//! takes the decoded [`When`]. Refusals are worded for the agent that asked, so the host can
//! return them as the tool's result and let it try again.

use std::time::Duration;

use chrono_tz::Tz;

use crate::clock::millis;
use crate::error::{Error, Result};
use crate::timing::{Cron, Timing, parse_rfc3339};

/// The `when` of a `request_wakeup` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// `{kind: "delay_ms", value: 300000}`: once, this many milliseconds after the request.
    DelayMs(u64),
    /// `{kind: "cron", value: "*/5 * * * *"}`: on every match, read in UTC.
    Cron(String),
    /// `{kind: "at", value: "2026-06-01T12:00:00Z"}`: once, at this RFC 3339 instant.
    At(String),
}

/// An accepted wakeup.
#[derive(Debug, Clone, PartialEq)]
pub struct Wakeup {
    /// When it fires.
    pub timing: Timing,
    /// Its first fire, epoch ms: the deadline to arm. For `delay_ms: 0` this is the request
    /// time itself, which [`Timing::next_after`] (strictly after) would not return.
    pub first_ms: i64,
}

impl Wakeup {
    /// Checks a wakeup requested at `now_ms`: its first fire must be no earlier than `now_ms`
    /// and no later than `now_ms + max_horizon`. The horizon bounds the first fire only; a
    /// `cron` wakeup goes on firing after it, for as long as the host's `trigger_ttl` lets any
    /// self-schedule live.
    pub fn request(when: &When, now_ms: i64, max_horizon: Duration) -> Result<Wakeup> {
        let (timing, first_ms) = match when {
            When::DelayMs(delay) => {
                let at_ms = i64::try_from(*delay)
                    .ok()
                    .and_then(|delay| now_ms.checked_add(delay))
                    .ok_or(Error::BadDelay(*delay))?;
                (Timing::At { at_ms }, at_ms)
            }
            When::Cron(expr) => {
                let cron = Cron::new(expr, Tz::UTC)?;
                let first_ms = cron
                    .next_after(now_ms)
                    .ok_or_else(|| Error::WakeupNeverFires(expr.clone()))?;
                (Timing::Cron(cron), first_ms)
            }
            When::At(text) => {
                let at_ms = parse_rfc3339(text)?;
                if at_ms < now_ms {
                    return Err(Error::WakeupInPast { at_ms, now_ms });
                }
                (Timing::At { at_ms }, at_ms)
            }
        };
        let latest_ms = now_ms.saturating_add(millis(max_horizon));
        if first_ms > latest_ms {
            return Err(Error::BeyondHorizon {
                first_ms,
                horizon: max_horizon,
                latest_ms,
            });
        }
        Ok(Wakeup { timing, first_ms })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on a bad fixture

    use super::*;

    const WEEK: Duration = Duration::from_secs(7 * 86_400);

    #[test]
    fn zero_delay_fires_at_the_request() {
        let now = 1_780_315_200_000;
        let wakeup = Wakeup::request(&When::DelayMs(0), now, WEEK).unwrap();
        assert_eq!(wakeup.first_ms, now);
    }

    #[test]
    fn overflowing_delay_is_refused() {
        assert_eq!(
            Wakeup::request(&When::DelayMs(u64::MAX), 0, WEEK),
            Err(Error::BadDelay(u64::MAX))
        );
    }
}
