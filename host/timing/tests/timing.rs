//! The timing of triggers and schedules, through the public API: cron across daylight-saving
//! changes, intervals, one-shots, missed ticks, the timer and its async driver, throttles,
//! quotas, TTLs and wakeup horizons.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use agentmesh_timing::clock::rfc3339;

/// An RFC 3339 instant as epoch ms.
fn ms(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_millis()
}

mod timing {
    use agentmesh_timing::{Error, Interval, Timing};

    use super::*;

    fn cron(expr: &str, tz: &str) -> Timing {
        Timing::from_parts(Some(expr), Some(tz), None, None).unwrap()
    }

    /// The next `n` fires after `after`, as RFC 3339 in UTC.
    fn fires(timing: &Timing, after: &str, n: usize) -> Vec<String> {
        let mut at = ms(after);
        (0..n)
            .map(|_| {
                at = timing.next_after(at).unwrap();
                rfc3339(at)
            })
            .collect()
    }

    #[test]
    fn daily_time_skipped_by_spring_forward_fires_at_the_gap_end_in_new_york() {
        // 2026-03-08 02:00 EST jumps to 03:00 EDT: 02:30 does not exist that day.
        let daily = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            fires(&daily, "2026-03-06T12:00:00-05:00", 3),
            [
                "2026-03-07T07:30:00Z", // 02:30 EST
                "2026-03-08T07:00:00Z", // 03:00 EDT, the end of the gap
                "2026-03-09T06:30:00Z", // 02:30 EDT
            ]
        );
    }

    #[test]
    fn daily_time_repeated_by_fall_back_fires_once_in_new_york() {
        // 2026-11-01 02:00 EDT falls back to 01:00 EST: 01:30 happens twice.
        let daily = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            fires(&daily, "2026-10-31T12:00:00-04:00", 2),
            [
                "2026-11-01T05:30:00Z", // 01:30 EDT, the first of the two
                "2026-11-02T06:30:00Z", // 01:30 EST the next day
            ]
        );
        // Asked from inside the repeated hour, the day's tick is already spent.
        assert_eq!(
            fires(&daily, "2026-11-01T01:10:00-05:00", 1),
            ["2026-11-02T06:30:00Z"]
        );
    }

    #[test]
    fn quarter_hours_inside_the_gap_collapse_into_one_fire() {
        let quarters = cron("*/15 * * * *", "America/New_York");
        assert_eq!(
            fires(&quarters, "2026-03-08T01:40:00-05:00", 3),
            [
                "2026-03-08T06:45:00Z", // 01:45 EST
                "2026-03-08T07:00:00Z", // 03:00 EDT: 02:00–02:45 skipped, 03:00 fires once
                "2026-03-08T07:15:00Z", // 03:15 EDT
            ]
        );
    }

    #[test]
    fn quarter_hours_of_the_repeated_hour_fire_once() {
        let quarters = cron("*/15 * * * *", "America/New_York");
        assert_eq!(
            fires(&quarters, "2026-11-01T01:40:00-04:00", 2),
            [
                "2026-11-01T05:45:00Z", // 01:45 EDT
                "2026-11-01T07:00:00Z", // 02:00 EST: 01:00–01:45 EST fire nothing
            ]
        );
        assert_eq!(
            fires(&quarters, "2026-11-01T01:20:00-05:00", 1),
            ["2026-11-01T07:00:00Z"]
        );
    }

    #[test]
    fn daily_time_across_both_changes_in_berlin() {
        // 2026-03-29 02:00 CET jumps to 03:00 CEST; 2026-10-25 03:00 CEST falls back to 02:00 CET.
        let daily = cron("30 2 * * *", "Europe/Berlin");
        assert_eq!(
            fires(&daily, "2026-03-28T12:00:00+01:00", 2),
            [
                "2026-03-29T01:00:00Z", // 03:00 CEST, the end of the gap
                "2026-03-30T00:30:00Z", // 02:30 CEST
            ]
        );
        assert_eq!(
            fires(&daily, "2026-10-24T12:00:00+02:00", 2),
            [
                "2026-10-25T00:30:00Z", // 02:30 CEST, the first of the two
                "2026-10-26T01:30:00Z", // 02:30 CET
            ]
        );
    }

    #[test]
    fn hourly_skips_the_repeated_hour_in_berlin() {
        let hourly = cron("0 * * * *", "Europe/Berlin");
        assert_eq!(
            fires(&hourly, "2026-10-25T01:30:00+02:00", 3),
            [
                "2026-10-25T00:00:00Z", // 02:00 CEST
                "2026-10-25T02:00:00Z", // 03:00 CET; 02:00 CET is the repeat
                "2026-10-25T03:00:00Z", // 04:00 CET
            ]
        );
    }

    #[test]
    fn cron_reads_the_wall_clock_of_its_zone() {
        let standup = cron("0 9 * * 1-5", "Australia/Sydney");
        // Friday 2026-06-05 10:00 in Sydney (AEST, +10): next is Monday 09:00.
        assert_eq!(
            fires(&standup, "2026-06-05T10:00:00+10:00", 1),
            ["2026-06-07T23:00:00Z"]
        );
        let utc = Timing::from_parts(Some("0 9 * * *"), None, None, None).unwrap();
        assert_eq!(
            fires(&utc, "2026-06-05T10:00:00Z", 1),
            ["2026-06-06T09:00:00Z"]
        );
    }

    #[test]
    fn cron_that_never_matches_has_no_next_fire() {
        let never = cron("0 0 31 2 *", "UTC");
        assert_eq!(never.next_after(ms("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn interval_from_a_manifest_is_anchored_at_the_epoch() {
        let every =
            Timing::from_parts(None, None, Some(Duration::from_secs(15 * 60)), None).unwrap();
        assert_eq!(
            fires(&every, "2026-06-01T12:07:31Z", 2),
            ["2026-06-01T12:15:00Z", "2026-06-01T12:30:00Z"]
        );
        assert_eq!(
            every.next_after(ms("2026-06-01T12:15:00Z")),
            Some(ms("2026-06-01T12:30:00Z")),
            "strictly after"
        );
    }

    #[test]
    fn interval_keeps_the_phase_of_its_anchor() {
        let every = Interval::new(Duration::from_secs(3), 1_000).unwrap();
        assert_eq!(every.next_after(1_000), Some(4_000));
        assert_eq!(every.next_after(5_999), Some(7_000));
        assert_eq!(every.next_after(7_000), Some(10_000));
        assert_eq!(
            (every.every(), every.anchor_ms()),
            (Duration::from_secs(3), 1_000)
        );
    }

    #[test]
    fn at_in_the_past_never_fires_again() {
        let once = Timing::from_parts(None, None, None, Some("2026-06-01T12:00:00+02:00")).unwrap();
        let at = ms("2026-06-01T10:00:00Z");
        assert_eq!(once, Timing::At { at_ms: at });
        assert_eq!(once.next_after(at - 1), Some(at));
        assert_eq!(once.next_after(at), None);
        assert_eq!(once.next_after(at + 86_400_000), None);
    }

    #[test]
    fn ticks_missed_while_down_fire_once() {
        let every = Timing::from_parts(None, None, Some(Duration::from_secs(60)), None).unwrap();
        let (last, start) = (ms("2026-06-01T10:00:00Z"), ms("2026-06-01T10:30:20Z"));
        // Thirty ticks were missed; one is reported, the first.
        assert_eq!(every.missed(last, start), Some(ms("2026-06-01T10:01:00Z")));
        // The host fires it at `start` and arms the next tick after `start`: nothing else is
        // missed any more.
        assert_eq!(every.missed(start, start), None);
        assert_eq!(every.next_after(start), Some(ms("2026-06-01T10:31:00Z")));
        // Nothing missed: the host was back before the next tick.
        assert_eq!(every.missed(last, last + 59_999), None);
    }

    #[test]
    fn missed_one_shot_fires_once_at_start() {
        let once = Timing::from_parts(None, None, None, Some("2026-06-01T12:00:00Z")).unwrap();
        let at = ms("2026-06-01T12:00:00Z");
        assert_eq!(once.missed(at - 3_600_000, at + 3_600_000), Some(at));
        assert_eq!(once.missed(at, at + 3_600_000), None, "already fired");
    }

    #[test]
    fn missed_cron_tick_across_a_dst_change_fires_once() {
        let daily = cron("30 2 * * *", "America/New_York");
        let (last, start) = (ms("2026-03-06T07:30:00Z"), ms("2026-03-10T12:00:00Z"));
        assert_eq!(daily.missed(last, start), Some(ms("2026-03-07T07:30:00Z")));
        assert_eq!(daily.missed(start, start), None);
    }

    #[test]
    fn schedule_needs_exactly_one_timing() {
        let none = Timing::from_parts(None, Some("UTC"), None, None).unwrap_err();
        assert_eq!(none, Error::NoTiming);
        let several =
            Timing::from_parts(Some("* * * * *"), None, None, Some("2026-06-01T12:00:00Z"))
                .unwrap_err();
        assert_eq!(
            several.to_string(),
            "a schedule needs exactly one of `cron`, `interval`, `at`; it has cron and at"
        );
    }

    #[test]
    fn unknown_time_zone_is_named() {
        let err =
            Timing::from_parts(Some("0 9 * * *"), Some("Mars/Olympus"), None, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown time zone `Mars/Olympus` (use an IANA name such as `Europe/Berlin`)"
        );
        // Refused whichever timing it comes with, as the manifest validator does.
        assert!(
            Timing::from_parts(
                None,
                Some("Mars/Olympus"),
                Some(Duration::from_secs(1)),
                None
            )
            .is_err()
        );
    }

    #[test]
    fn bad_at_and_bad_cron_say_what_is_expected() {
        let at = Timing::from_parts(None, None, None, Some("tomorrow noon")).unwrap_err();
        assert_eq!(
            at.to_string(),
            "`at` must be an RFC 3339 time such as 2026-06-01T12:00:00Z, found `tomorrow noon`"
        );
        let six = Timing::from_parts(Some("0 0 9 * * *"), None, None, None).unwrap_err();
        assert_eq!(
            six.to_string(),
            "bad cron `0 0 9 * * *`: expected 5 fields (minute hour day-of-month month day-of-week), found 6"
        );
        let range = Timing::from_parts(Some("61 * * * *"), None, None, None).unwrap_err();
        assert!(matches!(range, Error::BadCron { .. }), "{range}");
        let zero = Timing::from_parts(None, None, Some(Duration::ZERO), None).unwrap_err();
        assert_eq!(
            zero.to_string(),
            "`interval` must be at least 1ms (and under 292 million years), found 0ms"
        );
    }
}

mod wakeup {
    use agentmesh_timing::{Error, Timing, Wakeup, When};

    use super::*;

    const WEEK: Duration = Duration::from_secs(7 * 86_400);

    #[test]
    fn delay_fires_once_after_the_request() {
        let now = ms("2026-06-01T12:00:00Z");
        let wakeup = Wakeup::request(&When::DelayMs(300_000), now, WEEK).unwrap();
        assert_eq!(wakeup.first_ms, now + 300_000);
        assert_eq!(
            wakeup.timing,
            Timing::At {
                at_ms: now + 300_000
            }
        );
    }

    #[test]
    fn cron_wakeup_is_read_in_utc() {
        let now = ms("2026-06-01T12:03:00Z");
        let wakeup = Wakeup::request(&When::Cron("*/5 * * * *".into()), now, WEEK).unwrap();
        assert_eq!(rfc3339(wakeup.first_ms), "2026-06-01T12:05:00Z");
        assert_eq!(
            wakeup
                .timing
                .next_after(wakeup.first_ms)
                .map(rfc3339)
                .as_deref(),
            Some("2026-06-01T12:10:00Z")
        );
    }

    #[test]
    fn wakeup_exactly_at_the_horizon_is_accepted() {
        let now = ms("2026-06-01T12:00:00Z");
        let at = When::At("2026-06-08T12:00:00Z".into());
        assert_eq!(
            Wakeup::request(&at, now, WEEK).unwrap().first_ms,
            now + 7 * 86_400_000
        );
    }

    #[test]
    fn wakeup_beyond_the_horizon_is_refused() {
        let now = ms("2026-06-01T12:00:00Z");
        let delay = When::DelayMs(7 * 86_400_000 + 1);
        let err = Wakeup::request(&delay, now, WEEK).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the wakeup would first fire at 2026-06-08T12:00:00.001Z, beyond this host's limit of 7d ahead (at the latest 2026-06-08T12:00:00Z); ask for an earlier time"
        );
        let at = When::At("2026-07-01T00:00:00Z".into());
        assert!(matches!(
            Wakeup::request(&at, now, WEEK),
            Err(Error::BeyondHorizon { .. })
        ));
    }

    #[test]
    fn cron_wakeup_whose_first_fire_is_beyond_the_horizon_is_refused() {
        let now = ms("2026-06-01T12:00:00Z");
        let new_year = When::Cron("0 0 1 1 *".into());
        let err = Wakeup::request(&new_year, now, WEEK).unwrap_err();
        assert!(
            matches!(err, Error::BeyondHorizon { first_ms, .. } if first_ms == ms("2027-01-01T00:00:00Z")),
            "{err}"
        );
    }

    #[test]
    fn wakeup_in_the_past_or_malformed_is_refused() {
        let now = ms("2026-06-01T12:00:00Z");
        let past = Wakeup::request(&When::At("2026-06-01T11:59:59Z".into()), now, WEEK);
        assert_eq!(
            past.unwrap_err().to_string(),
            "the wakeup time 2026-06-01T11:59:59Z is in the past; ask for a time after 2026-06-01T12:00:00Z"
        );
        assert!(matches!(
            Wakeup::request(&When::At("soon".into()), now, WEEK),
            Err(Error::BadAt(_))
        ));
        assert!(matches!(
            Wakeup::request(&When::Cron("every 5 minutes".into()), now, WEEK),
            Err(Error::BadCron { .. })
        ));
        assert_eq!(
            Wakeup::request(&When::Cron("0 0 30 2 *".into()), now, WEEK),
            Err(Error::WakeupNeverFires("0 0 30 2 *".into()))
        );
    }
}

mod timer {
    use std::time::Duration;

    use agentmesh_timing::clock::now_ms;
    use agentmesh_timing::{Due, Timer, TimerHandle};

    fn ids<Id>(due: Vec<Due<Id>>) -> Vec<Id> {
        due.into_iter().map(|d| d.id).collect()
    }

    #[test]
    fn due_ids_pop_earliest_first() {
        let mut timer = Timer::new();
        timer.arm("c", 30);
        timer.arm("a", 10);
        timer.arm("b", 20);
        timer.arm("later", 100);
        assert_eq!(timer.next_deadline(), Some(10));
        assert_eq!(
            timer.pop_due(30),
            [
                Due { id: "a", at_ms: 10 },
                Due { id: "b", at_ms: 20 },
                Due { id: "c", at_ms: 30 }
            ]
        );
        assert_eq!(timer.len(), 1);
        assert!(timer.pop_due(99).is_empty());
    }

    #[test]
    fn many_deadlines_pop_in_order() {
        let mut timer = Timer::new();
        // A fixed pseudo-random permutation of 10,000 deadlines.
        for i in 0..10_000u64 {
            let at = i64::try_from(i * 7_919 % 10_000).unwrap();
            timer.arm(i, at);
        }
        let due = timer.pop_due(i64::MAX);
        assert_eq!(due.len(), 10_000);
        assert!(due.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
        assert!(timer.is_empty());
    }

    #[test]
    fn disarmed_id_never_fires() {
        let mut timer = Timer::new();
        timer.arm("gone", 10);
        timer.arm("kept", 20);
        assert!(timer.disarm(&"gone"));
        assert!(!timer.disarm(&"gone"));
        assert!(!timer.disarm(&"never-armed"));
        assert_eq!(timer.next_deadline(), Some(20));
        assert_eq!(ids(timer.pop_due(20)), ["kept"]);
    }

    #[test]
    fn rearming_moves_the_deadline() {
        let mut timer = Timer::new();
        timer.arm("s", 10);
        timer.arm("s", 30);
        assert_eq!(timer.deadline(&"s"), Some(30));
        assert!(timer.pop_due(20).is_empty());
        assert_eq!(timer.pop_due(30), [Due { id: "s", at_ms: 30 }]);
        // And earlier again.
        timer.arm("s", 50);
        timer.arm("s", 40);
        assert_eq!(timer.pop_due(45), [Due { id: "s", at_ms: 40 }]);
        assert!(timer.pop_due(i64::MAX).is_empty(), "no second fire");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_deadline_is_due_at_once() {
        let timer = TimerHandle::new();
        timer.arm("late".to_owned(), now_ms() - 5_000);
        let due = tokio::time::timeout(Duration::from_secs(1), timer.next_due())
            .await
            .unwrap();
        assert_eq!(ids(due), ["late"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn earlier_arm_wakes_the_sleeping_driver() {
        let timer = TimerHandle::new();
        timer.arm("in-an-hour", now_ms() + 3_600_000);
        let driver = tokio::spawn({
            let timer = timer.clone();
            async move { timer.next_due().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let armed = now_ms() + 50;
        timer.arm("soon", armed);
        let due = tokio::time::timeout(Duration::from_secs(2), driver)
            .await
            .expect("the driver slept through an earlier deadline")
            .unwrap();
        let fired = now_ms();
        assert_eq!(ids(due), ["soon"]);
        assert!(fired >= armed, "fired {}ms early", armed - fired);
        assert_eq!(timer.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn disarmed_deadline_does_not_end_the_wait() {
        let timer = TimerHandle::new();
        timer.arm("revoked", now_ms() + 30);
        timer.arm("kept", now_ms() + 150);
        assert!(timer.disarm(&"revoked"));
        let due = tokio::time::timeout(Duration::from_secs(2), timer.next_due())
            .await
            .unwrap();
        assert_eq!(ids(due), ["kept"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn handles_arm_from_other_tasks() {
        let timer = TimerHandle::new();
        let base = now_ms() + 20;
        let arms: Vec<_> = (0..100)
            .map(|i| {
                let timer = timer.clone();
                tokio::spawn(async move { timer.arm(i, base + i64::from(i % 5)) })
            })
            .collect();
        for arm in arms {
            arm.await.unwrap();
        }
        let mut fired = Vec::new();
        while fired.len() < 100 {
            let due = tokio::time::timeout(Duration::from_secs(2), timer.next_due())
                .await
                .unwrap();
            fired.extend(due);
        }
        assert!(fired.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(timer.is_empty());
    }
}

mod bounds {
    use agentmesh_timing::{DailyQuota, Throttle, ttl};

    use super::*;

    const HOUR: i64 = 3_600_000;

    #[test]
    fn throttle_counts_a_rolling_hour() {
        let mut throttle = Throttle::new(2);
        assert!(throttle.allow(0));
        assert!(throttle.allow(1_000));
        assert!(!throttle.allow(HOUR - 1), "two fires in the last hour");
        assert_eq!(throttle.dropped(), 1);
        assert!(throttle.allow(HOUR), "the fire at 0 has left the window");
        assert!(!throttle.allow(HOUR + 999));
        assert!(throttle.allow(HOUR + 1_000));
        assert_eq!(throttle.dropped(), 2);
    }

    #[test]
    fn throttle_drops_the_excess_of_a_burst() {
        let mut throttle = Throttle::new(60);
        let allowed = (0..100).filter(|i| throttle.allow(i * 10)).count();
        assert_eq!((allowed, throttle.dropped()), (60, 40));
    }

    #[test]
    fn zero_throttle_allows_nothing() {
        let mut throttle = Throttle::new(0);
        assert!(!throttle.allow(0));
    }

    #[test]
    fn quota_is_per_user_per_utc_day() {
        let mut quota = DailyQuota::new(2);
        let midnight = ms("2026-06-02T00:00:00Z");
        assert!(quota.take("user:a", midnight - 2));
        assert!(quota.take("user:a", midnight - 1));
        assert!(!quota.take("user:a", midnight - 1), "spent for 2026-06-01");
        assert!(
            quota.take("user:b", midnight - 1),
            "another user's own quota"
        );
        assert_eq!(quota.used("user:a", midnight - 1), 2);
        assert_eq!(quota.used("user:a", midnight), 0, "a new UTC day");
        assert!(quota.take("user:a", midnight));
        assert_eq!(quota.used("user:a", midnight), 1);
        assert_eq!(quota.used("user:b", midnight), 0);
    }

    #[test]
    fn quota_days_are_utc_not_local() {
        let mut quota = DailyQuota::new(1);
        // 23:30 and 00:30 in Berlin are the same UTC day (2026-06-01).
        assert!(quota.take("user:a", ms("2026-06-01T23:30:00+02:00")));
        assert!(!quota.take("user:a", ms("2026-06-02T00:30:00+02:00")));
    }

    #[test]
    fn ttl_expires_at_its_instant() {
        let week = Duration::from_secs(7 * 86_400);
        let created = ms("2026-06-01T12:00:00Z");
        let end = ms("2026-06-08T12:00:00Z");
        assert_eq!(ttl::expires_at(created, week), end);
        assert!(!ttl::expired(created, week, end - 1));
        assert!(ttl::expired(created, week, end));
        assert_eq!(ttl::expires_at(i64::MAX - 1, week), i64::MAX, "saturates");
    }
}
