//! Fire-rate bounds: [`Throttle`], a trigger's `max_per_hour` over a rolling hour, and
//! [`DailyQuota`], the host's `triggered_turns_per_user_per_day` per UTC day. Both are small,
//! in-memory and exact; a fire they refuse is dropped, and the caller records it (the spec's
//! drop-on-cap rule: dropped, not queued). Their counts can be read out and resumed
//! ([`Throttle::resume`], [`DailyQuota::resume`]), so that a host keeping them in a store
//! applies the same caps after a restart.

use std::collections::{HashMap, VecDeque};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// At most `max_per_hour` fires in any rolling hour, for one trigger or schedule.
#[derive(Debug, Clone)]
pub struct Throttle {
    limit: usize,
    /// The fires let through in the last hour, oldest first. Never longer than the limit, so
    /// memory is 8 bytes per allowed fire, bounded by the manifest's own number.
    recent: VecDeque<i64>,
    dropped: u64,
}

impl Throttle {
    /// A throttle allowing `max_per_hour` fires per rolling hour (0 allows none).
    pub fn new(max_per_hour: u32) -> Self {
        Throttle {
            limit: usize::try_from(max_per_hour).unwrap_or(usize::MAX),
            recent: VecDeque::new(),
            dropped: 0,
        }
    }

    /// A throttle allowing `max_per_hour` fires per rolling hour that has already let through
    /// the fires at `recent` (epoch ms, as [`recent`](Self::recent) gave them): they count
    /// until an hour after each. Only the latest `max_per_hour` matter, so only those are kept.
    pub fn resume(max_per_hour: u32, recent: impl IntoIterator<Item = i64>) -> Self {
        let mut throttle = Throttle::new(max_per_hour);
        for fired in recent {
            let fired = throttle
                .recent
                .back()
                .map_or(fired, |&last| last.max(fired));
            throttle.recent.push_back(fired);
        }
        while throttle.recent.len() > throttle.limit {
            throttle.recent.pop_front();
        }
        throttle
    }

    /// The fires let through that may still count (in the last hour as of the latest call),
    /// oldest first.
    pub fn recent(&self) -> impl Iterator<Item = i64> + '_ {
        self.recent.iter().copied()
    }

    /// Whether a fire at `now_ms` may go ahead; counts it if so, and counts it as dropped if
    /// not. A fire stays in the window for exactly an hour: with a limit of 1, fires at `t` and
    /// `t + 1h` both pass, one at `t + 1h - 1ms` does not.
    pub fn allow(&mut self, now_ms: i64) -> bool {
        let window_start = now_ms.saturating_sub(HOUR_MS);
        while self
            .recent
            .front()
            .is_some_and(|&fired| fired <= window_start)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.limit {
            self.dropped += 1;
            return false;
        }
        // A clock that stepped back must not let a fire leave the window early, so times are
        // kept in order: a fire is recorded no earlier than the latest one.
        let fired = self.recent.back().map_or(now_ms, |&last| last.max(now_ms));
        self.recent.push_back(fired);
        true
    }

    /// Gives back the latest fire [`allow`](Self::allow) let through (it did not happen
    /// after all: another host fired it), so that it no longer counts.
    pub fn give_back(&mut self) {
        self.recent.pop_back();
    }

    /// How many fires [`allow`](Self::allow) has refused.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// At most `per_day` triggered turns per user per UTC day.
#[derive(Debug, Clone)]
pub struct DailyQuota {
    per_day: u32,
    /// The UTC day (days since the epoch) `used` counts.
    day: i64,
    /// Turns per user today; cleared when the day turns, so it holds only today's users.
    used: HashMap<String, u32>,
}

impl DailyQuota {
    /// A quota of `per_day` turns per user (0 allows none).
    pub fn new(per_day: u32) -> Self {
        DailyQuota {
            per_day,
            day: i64::MIN,
            used: HashMap::new(),
        }
    }

    /// Takes one turn of `user`'s quota for the UTC day of `now_ms`; false, taking nothing,
    /// when the day's quota is spent. A clock that steps back into the previous day keeps
    /// counting against the later one rather than granting a second quota.
    pub fn take(&mut self, user: &str, now_ms: i64) -> bool {
        let day = now_ms.div_euclid(DAY_MS);
        if day > self.day {
            self.day = day;
            self.used.clear();
        }
        match self.used.get_mut(user) {
            Some(used) if *used >= self.per_day => false,
            Some(used) => {
                *used += 1;
                true
            }
            None if self.per_day == 0 => false,
            None => {
                self.used.insert(user.to_owned(), 1);
                true
            }
        }
    }

    /// Gives back one turn [`take`](Self::take) took of `user`'s quota for the UTC day of
    /// `now_ms` (it did not happen after all); nothing once the day has turned.
    pub fn give_back(&mut self, user: &str, now_ms: i64) {
        if now_ms.div_euclid(DAY_MS) == self.day
            && let Some(used) = self.used.get_mut(user)
        {
            *used = used.saturating_sub(1);
        }
    }

    /// The UTC day of `now_ms`, as this quota counts days (days since the epoch).
    pub fn day_of(now_ms: i64) -> i64 {
        now_ms.div_euclid(DAY_MS)
    }

    /// Resumes `user`'s count of `used` turns on UTC day `day` (as [`day_of`](Self::day_of)
    /// gives it), e.g. kept across a restart. A later day than the quota's starts it, as
    /// [`take`](Self::take) would; an earlier day counts nothing; a count this quota already
    /// exceeds changes nothing.
    pub fn resume(&mut self, user: &str, day: i64, used: u32) {
        if day > self.day {
            self.day = day;
            self.used.clear();
        }
        if day == self.day && used > 0 {
            let count = self.used.entry(user.to_owned()).or_insert(0);
            *count = (*count).max(used);
        }
    }

    /// How many turns `user` has taken on the UTC day of `now_ms`.
    pub fn used(&self, user: &str, now_ms: i64) -> u32 {
        if now_ms.div_euclid(DAY_MS) > self.day {
            return 0;
        }
        self.used.get(user).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fire_given_back_no_longer_counts() {
        let mut throttle = Throttle::new(1);
        assert!(throttle.allow(HOUR_MS));
        throttle.give_back();
        assert!(throttle.allow(HOUR_MS + 1));
        assert!(!throttle.allow(HOUR_MS + 2));
        let mut quota = DailyQuota::new(1);
        assert!(quota.take("u", DAY_MS));
        quota.give_back("u", DAY_MS + 1);
        assert_eq!(quota.used("u", DAY_MS + 1), 0);
        assert!(quota.take("u", DAY_MS + 2));
        assert!(!quota.take("u", DAY_MS + 3));
        // A turn of yesterday given back leaves today's count alone.
        quota.give_back("u", 3 * DAY_MS);
        assert_eq!(quota.used("u", DAY_MS + 4), 1);
    }

    #[test]
    fn clock_stepping_back_keeps_fires_in_the_window() {
        let mut throttle = Throttle::new(2);
        assert!(throttle.allow(10 * HOUR_MS));
        assert!(throttle.allow(9 * HOUR_MS));
        // The second fire counts as at 10h, so both leave together, an hour after 10h.
        assert!(!throttle.allow(11 * HOUR_MS - 1));
        assert!(throttle.allow(11 * HOUR_MS));
        assert!(throttle.allow(11 * HOUR_MS));
    }

    #[test]
    fn a_resumed_throttle_counts_the_fires_before_it() {
        let mut before = Throttle::new(2);
        assert!(before.allow(HOUR_MS));
        assert!(before.allow(HOUR_MS + 10));
        let mut after = Throttle::resume(2, before.recent());
        assert!(!after.allow(HOUR_MS + 20), "two fires in the hour already");
        assert!(
            after.allow(2 * HOUR_MS),
            "the first one has left the window"
        );
        assert!(!after.allow(2 * HOUR_MS + 1));
    }

    #[test]
    fn a_throttle_resumed_under_a_lower_limit_keeps_the_latest_fires() {
        let mut after = Throttle::resume(1, [10, 20, 30]);
        assert_eq!(after.recent().collect::<Vec<_>>(), [30]);
        assert!(!after.allow(HOUR_MS + 29));
        assert!(after.allow(HOUR_MS + 30));
    }

    #[test]
    fn a_resumed_quota_counts_only_the_same_day() {
        let now = 3 * DAY_MS + 5;
        let mut quota = DailyQuota::new(2);
        quota.resume("user:a", DailyQuota::day_of(now) - 1, 2);
        assert_eq!(
            quota.used("user:a", now),
            0,
            "yesterday's turns do not count"
        );
        quota.resume("user:a", DailyQuota::day_of(now), 1);
        assert!(quota.take("user:a", now));
        assert!(
            !quota.take("user:a", now),
            "one before the restart, one after"
        );
        quota.resume("user:a", DailyQuota::day_of(now), 1);
        assert_eq!(
            quota.used("user:a", now),
            2,
            "an older, lower count changes nothing"
        );
    }

    #[test]
    fn zero_quota_allows_nothing() {
        let mut quota = DailyQuota::new(0);
        assert!(!quota.take("user:a", 0));
        assert_eq!(quota.used("user:a", 0), 0);
    }
}
