//! Timing for agentmesh triggers, schedules and wakeups (fired by `agentmesh-triggers`): when a schedule fires, the timer that waits for
//! thousands of them at once, and the bounds every trigger carries. Pure logic — no HTTP, no
//! store, no engine; the host reads schedules from the manifests and the store and drives
//! these types.
//!
//! - [`timing`]: [`Timing`], a schedule's `cron` read in an IANA `timezone` (daylight saving is
//!   decided there), `interval` or one-shot `at`; its next fire and the tick missed while the
//!   host was down.
//! - [`wakeup`]: the `when` of the `request_wakeup` host tool, checked against
//!   `policy.max_wakeup_horizon`.
//! - [`timer`]: [`Timer`], many armed deadlines, and [`TimerHandle`], the same shared between
//!   tokio tasks with an async driver.
//! - [`throttle`]: [`Throttle`], a trigger's fires per rolling hour, and [`DailyQuota`], triggered
//!   turns per user per UTC day.
//! - [`ttl`]: when a trigger with a `ttl` expires.
//! - [`clock`]: the unit of every time here, milliseconds since the Unix epoch (`i64`, UTC).
//!
//! Errors are one [`Error`] enum (`error`), each message written for the author of the value.
//!
//! ```
//! use std::time::Duration;
//!
//! use agentmesh_timing::{TimerHandle, Timing, clock::now_ms};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agentmesh_timing::Result<()> {
//! // As in a schedule manifest: `cron` + `timezone`, or `interval`, or `at`.
//! let standup = Timing::from_parts(Some("0 9 * * 1-5"), Some("Australia/Sydney"), None, None)?;
//! let heartbeat = Timing::from_parts(None, None, Some(Duration::from_millis(50)), None)?;
//!
//! let timer = TimerHandle::new();
//! let now = now_ms();
//! for (id, timing) in [("eng/standup", &standup), ("ops/heartbeat", &heartbeat)] {
//!     if let Some(at) = timing.next_after(now) {
//!         timer.arm(id, at);
//!     }
//! }
//!
//! // The driver: wait for what is due, fire it, arm its next tick.
//! let due = timer.next_due().await;
//! assert_eq!(due[0].id, "ops/heartbeat");
//! if let Some(next) = heartbeat.next_after(now_ms()) {
//!     timer.arm(due[0].id, next);
//! }
//! # Ok(())
//! # }
//! ```

pub mod clock;
mod error;
pub mod throttle;
pub mod timer;
pub mod timing;
pub mod ttl;
pub mod wakeup;

pub use error::{Error, Result};
pub use throttle::{DailyQuota, Throttle};
pub use timer::{Due, Timer, TimerHandle};
pub use timing::{Cron, Interval, Timing};
pub use wakeup::{Wakeup, When};
