//! Auto-expiry: a trigger or schedule with a `ttl` (and every self-schedule, with the host's
//! `policy.trigger_ttl`) fires one final time when it has lived that long, then deletes itself.
//! The host arms [`expires_at`] as that final fire.

use std::time::Duration;

use crate::clock::millis;

/// When something created at `created_ms` with `ttl` expires, epoch ms (saturating).
pub fn expires_at(created_ms: i64, ttl: Duration) -> i64 {
    created_ms.saturating_add(millis(ttl))
}

/// Whether something created at `created_ms` with `ttl` has expired at `now_ms`: from the
/// instant of [`expires_at`] on.
pub fn expired(created_ms: i64, ttl: Duration, now_ms: i64) -> bool {
    now_ms >= expires_at(created_ms, ttl)
}
