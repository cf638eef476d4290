//! Self-scheduling (the triggers page, CONTRACT §5): the host tools `request_wakeup` and
//! `cancel_wakeup` every agent has, and the wakeups they keep.
//!
//! A wakeup is persisted in the store before the tool answers (so it survives a crash) and
//! fires as a user message in the *same* task, with `trigger.source = "self-schedule"` and its
//! `schedule_id`, queued FIFO with every other input. Bounds: the first fire no further ahead
//! than `policy.max_wakeup_horizon`, at most `policy.max_wakeups_per_task` pending per task,
//! and a lifetime of `policy.trigger_ttl` (7 days by default): a wakeup still pending then
//! fires one final time and deletes itself. Deleting a task deletes its wakeups; its user can
//! list and revoke them over the API.

use std::time::Duration;

use agentmesh_model::event::ContentPart;
use agentmesh_store::Typed;
use agentmesh_store::now_ms;
use agentmesh_timing::clock::rfc3339;
use agentmesh_timing::{Cron, Wakeup, When};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use agentmesh_engine::plan::HostTool;
use agentmesh_engine::plan::triggers::{
    DEFAULT_MAX_WAKEUP_HORIZON, DEFAULT_MAX_WAKEUPS_PER_TASK, DEFAULT_TRIGGER_MAX_PER_HOUR,
    DEFAULT_TRIGGER_TTL,
};
use agentmesh_engine::{Accepted, Arrival, EngineError, Input, Origin, Run, Status, TaskRecord};

use crate::{Result, TimerId, Triggers, lock};

/// The store namespace of wakeups.
const WAKEUP_STATE: &str = "wakeup";

/// How long after a wakeup's fire that queued nothing failed it is tried again.
const WAKEUP_RETRY: Duration = Duration::from_secs(2);

/// The key of wakeup `id`'s throttle.
fn throttle_key(id: &str) -> String {
    format!("wakeup:{id}")
}

/// A pending wakeup, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WakeupRecord {
    /// The `schedule_id`.
    pub id: String,
    /// The task it wakes.
    pub task_id: String,
    /// The task's user when it was requested.
    pub owner: String,
    /// The request's `when`, as `{kind, value}`.
    pub when: Value,
    /// For a recurring wakeup: its cron expression (UTC).
    #[serde(default)]
    pub cron: Option<String>,
    /// The message it delivers.
    pub prompt: String,
    /// Why the agent asked.
    pub reason: String,
    /// Epoch ms.
    pub created_ms: i64,
    /// The next fire, epoch ms.
    pub next_ms: i64,
    /// The final fire, epoch ms (its TTL).
    pub expires_ms: i64,
    /// How often it has fired.
    #[serde(default)]
    pub fires: u64,
}

/// Decodes a `when`: the page's `{kind, value}` or the shorthand `{delay_ms: N}`,
/// `{cron: "…"}`, `{at: "…"}`.
fn decode_when(when: &Value) -> Result<When, String> {
    let (kind, value) = match (when.get("kind").and_then(Value::as_str), when.get("value")) {
        (Some(kind), Some(value)) => (kind, value),
        _ => match when
            .as_object()
            .filter(|m| m.len() == 1)
            .and_then(|m| m.iter().next())
        {
            Some((kind, value)) => (kind.as_str(), value),
            None => {
                return Err(
                    "`when` must be {\"kind\": \"delay_ms\"|\"cron\"|\"at\", \"value\": …}".into(),
                );
            }
        },
    };
    match kind {
        "delay_ms" => value
            .as_u64()
            .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
            .map(When::DelayMs)
            .ok_or_else(|| "`delay_ms` must be a whole number of milliseconds".to_owned()),
        "cron" => value
            .as_str()
            .map(|s| When::Cron(s.to_owned()))
            .ok_or_else(|| "`cron` must be a string such as \"*/5 * * * *\"".to_owned()),
        "at" => value
            .as_str()
            .map(|s| When::At(s.to_owned()))
            .ok_or_else(|| "`at` must be an RFC 3339 string".to_owned()),
        other => Err(format!(
            "unknown `when` kind `{other}`: use delay_ms, cron or at"
        )),
    }
}

fn when_value(when: &When) -> Value {
    match when {
        When::DelayMs(ms) => json!({"kind": "delay_ms", "value": ms}),
        When::Cron(expr) => json!({"kind": "cron", "value": expr}),
        When::At(at) => json!({"kind": "at", "value": at}),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Runs host tool `tool` for task `record`: its result, or the error the LLM is told.
pub(crate) fn call(
    triggers: &Triggers,
    record: &TaskRecord,
    tool: HostTool,
    args: &Value,
) -> Result<Value, String> {
    let result = match tool {
        HostTool::RequestWakeup => triggers.request_wakeup(record, args),
        HostTool::CancelWakeup => triggers.cancel_wakeup(record, args),
    };
    result.unwrap_or_else(|e| Err(format!("the host could not do it: {e}")))
}

impl Triggers {
    /// `request_wakeup`: the outer error is the host's, the inner one the agent's.
    fn request_wakeup(&self, record: &TaskRecord, args: &Value) -> Result<Result<Value, String>> {
        let Some(when) = args.get("when") else {
            return Ok(Err("missing `when`".into()));
        };
        let when = match decode_when(when) {
            Ok(w) => w,
            Err(e) => return Ok(Err(e)),
        };
        let Some(prompt) = args.get("prompt").and_then(Value::as_str) else {
            return Ok(Err("missing `prompt` (a string)".into()));
        };
        let reason = args
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let policy = self.engine.plan().host.policy.clone();
        let horizon = policy
            .max_wakeup_horizon
            .map_or(DEFAULT_MAX_WAKEUP_HORIZON, |d| d.0);
        let max = policy
            .max_wakeups_per_task
            .unwrap_or(DEFAULT_MAX_WAKEUPS_PER_TASK);
        let ttl = policy.trigger_ttl.map_or(DEFAULT_TRIGGER_TTL, |d| d.0);
        let now = now_ms();
        let wakeup = match Wakeup::request(&when, now, horizon) {
            Ok(w) => w,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let _serial = lock(&self.firing.state);
        let pending = self
            .wakeups()?
            .iter()
            .filter(|w| w.task_id == record.id)
            .count();
        if pending >= usize::try_from(max).unwrap_or(usize::MAX) {
            return Ok(Err(format!(
                "this task already has {pending} pending wakeups, the most this host allows; cancel one first"
            )));
        }
        let id = format!("wk_{:x}{:06x}", now, self.engine.store().next_id()?);
        let expires_ms = now.saturating_add(millis(ttl));
        let w = WakeupRecord {
            id: id.clone(),
            task_id: record.id.clone(),
            owner: record.user.id.clone(),
            when: when_value(&when),
            cron: match &when {
                When::Cron(expr) => Some(expr.clone()),
                _ => None,
            },
            prompt: prompt.to_owned(),
            reason: reason.to_owned(),
            created_ms: now,
            next_ms: wakeup.first_ms.min(expires_ms),
            expires_ms,
            fires: 0,
        };
        self.engine
            .store()
            .save_state_durably(WAKEUP_STATE, &id, &w)?;
        self.firing
            .timer
            .arm(TimerId::Wakeup(id.clone()), w.next_ms);
        tracing::info!(task.id = %record.id, schedule.id = %id, reason, "wakeup requested");
        Ok(Ok(json!({
            "schedule_id": id,
            "next_trigger_at": rfc3339(w.next_ms),
            "expires_at": rfc3339(expires_ms),
        })))
    }

    /// `cancel_wakeup`: only a wakeup of this task.
    fn cancel_wakeup(&self, record: &TaskRecord, args: &Value) -> Result<Result<Value, String>> {
        let Some(id) = args.get("schedule_id").and_then(Value::as_str) else {
            return Ok(Err("missing `schedule_id` (a string)".into()));
        };
        match self.wakeup(id)? {
            Some(w) if w.task_id == record.id => {
                self.delete_wakeup(id)?;
                Ok(Ok(json!({"cancelled": id})))
            }
            _ => Ok(Err(format!("this task has no pending wakeup `{id}`"))),
        }
    }

    /// Every stored wakeup.
    fn wakeups(&self) -> Result<Vec<WakeupRecord>> {
        Ok(self
            .engine
            .store()
            .states::<WakeupRecord>(WAKEUP_STATE)?
            .into_iter()
            .map(|(_, w)| w)
            .collect())
    }

    /// Wakeup `id`.
    pub(crate) fn wakeup(&self, id: &str) -> Result<Option<WakeupRecord>> {
        Ok(self.engine.store().state(WAKEUP_STATE, id)?)
    }

    /// Deletes wakeup `id`; whether there was one.
    pub(crate) fn delete_wakeup(&self, id: &str) -> Result<bool> {
        self.firing.timer.disarm(&TimerId::Wakeup(id.to_owned()));
        if self.wakeup(id)?.is_none() {
            return Ok(false);
        }
        self.forget_throttle(&throttle_key(id))?;
        self.engine.store().delete_state_durably(WAKEUP_STATE, id)?;
        Ok(true)
    }

    /// Deletes every wakeup of task `task` (the task is being deleted); returns how many.
    pub(crate) fn delete_task_wakeups(&self, task: &str) -> Result<usize> {
        let mut n = 0;
        for w in self.wakeups()?.iter().filter(|w| w.task_id == task) {
            n += usize::from(self.delete_wakeup(&w.id)?);
        }
        Ok(n)
    }

    /// Arms every stored wakeup; one whose time passed while the host was down fires now,
    /// once. Wakeups of tasks that are gone or terminated are deleted.
    pub(crate) async fn arm_wakeups(&self) -> Result<()> {
        let now = now_ms();
        for w in self.wakeups()? {
            // A task that cannot be read is not gone: its wakeup is armed, and its fire looks
            // again.
            let ended = match self.engine.task(&w.task_id) {
                Ok(t) => t.status() == Status::Terminated,
                Err(EngineError::NotFound(_)) => true,
                Err(e) => {
                    tracing::warn!(task.id = %w.task_id, schedule.id = %w.id, "reading the task of a wakeup failed: {e}");
                    false
                }
            };
            if ended {
                self.delete_wakeup(&w.id)?;
            } else {
                self.firing
                    .timer
                    .arm(TimerId::Wakeup(w.id.clone()), w.next_ms.max(now));
            }
        }
        Ok(())
    }

    /// Fires wakeup `id`: a user message with the self-schedule envelope in its task, through
    /// the door, then its next fire (a cron wakeup before its TTL) or its deletion. The store
    /// work runs on the blocking pool: queueing the message and storing the wakeup each wait
    /// for an fsync.
    pub(crate) async fn fire_wakeup(&self, id: &str) {
        if let Err(e) = self.try_fire_wakeup(id).await {
            tracing::warn!(schedule.id = %id, "wakeup fire failed: {e}");
        }
    }

    /// Arms wakeup `id` again after a fire that queued nothing failed (the store refused to
    /// read it or its task, or to queue its input): it is still stored as due, and nothing
    /// else would fire it before the host restarts.
    fn retry_wakeup(&self, id: &str, e: &EngineError) {
        tracing::warn!(schedule.id = %id, "wakeup fire failed, tried again in {WAKEUP_RETRY:?}: {e}");
        let at = now_ms().saturating_add(i64::try_from(WAKEUP_RETRY.as_millis()).unwrap_or(0));
        self.firing.timer.arm(TimerId::Wakeup(id.to_owned()), at);
    }

    async fn try_fire_wakeup(&self, id: &str) -> Result<()> {
        let owned = id.to_owned();
        let due = self.off_workers(move |engine| engine.wakeup_due(&owned));
        let Some((w, message, now)) = due.await.inspect_err(|e| self.retry_wakeup(id, e))? else {
            return Ok(());
        };
        if let Some(io) = message {
            let input = Input::new(w.task_id.clone(), io, Origin::Wakeup { id: id.to_owned() });
            // Every host sharing the store arms every wakeup: the first to queue a fire is the
            // one that fires it, in the same write. The same makes a retry after a failed
            // write whose input did land (its flush failed) no second fire.
            let arrival = Arrival::once(format!("wakeup:{id}:{}", w.next_ms));
            let accepted = arrival
                .accept(&self.engine, vec![input], Run::Background)
                .await
                .inspect_err(|e| self.retry_wakeup(id, e))?;
            if accepted == Accepted::Duplicate {
                // Another host fired it (or an earlier try here, whose write landed); it goes
                // on from there unless that host went down before it did.
                let owned = id.to_owned();
                let fired_at = w.next_ms;
                return self
                    .off_workers(move |engine| match engine.wakeup(&owned)? {
                        Some(stored) if stored.next_ms == fired_at => {
                            engine.after_wakeup(&owned, stored, now)
                        }
                        _ => Ok(()),
                    })
                    .await;
            }
        }
        let owned = id.to_owned();
        self.off_workers(move |engine| engine.after_wakeup(&owned, w, now))
            .await
    }

    /// Wakeup `id` when it is due and its task alive (a wakeup of a task that ended is
    /// deleted), with the message to queue unless a bound drops this fire, and the time.
    fn wakeup_due(&self, id: &str) -> Result<Option<(WakeupRecord, Option<Value>, i64)>> {
        let Some(w) = self.wakeup(id)? else {
            return Ok(None);
        };
        let now = now_ms();
        // A task that cannot be read is not gone: the fire fails, to be tried again.
        let alive = match self.engine.task(&w.task_id) {
            Ok(t) => t.status() != Status::Terminated,
            Err(EngineError::NotFound(_)) => false,
            Err(e) => return Err(e),
        };
        if !alive {
            self.delete_wakeup(id)?;
            return Ok(None);
        }
        let max_per_hour = self
            .engine
            .plan()
            .host
            .policy
            .trigger_max_per_hour
            .unwrap_or(DEFAULT_TRIGGER_MAX_PER_HOUR);
        let message = match self.bound_fire(&throttle_key(id), max_per_hour, &w.owner, now)? {
            Some(why) => {
                tracing::info!(task.id = %w.task_id, schedule.id = %id, "{why}");
                None
            }
            None => Some(json!({"message": [ContentPart::text(w.prompt.clone())]})),
        };
        Ok(Some((w, message, now)))
    }

    /// After wakeup `id` fired at `now`: its next fire armed, or it is deleted.
    fn after_wakeup(&self, id: &str, mut w: WakeupRecord, now: i64) -> Result<()> {
        let last = now >= w.expires_ms;
        let next = w
            .cron
            .as_deref()
            .filter(|_| !last)
            .and_then(|expr| Cron::new(expr, chrono_tz::Tz::UTC).ok())
            .and_then(|cron| cron.next_after(now));
        match next {
            Some(next) => {
                w.fires += 1;
                w.next_ms = next.min(w.expires_ms);
                self.engine
                    .store()
                    .save_state_durably(WAKEUP_STATE, id, &w)?;
                self.firing
                    .timer
                    .arm(TimerId::Wakeup(id.to_owned()), w.next_ms);
            }
            None => {
                if last {
                    tracing::info!(schedule.id = %id, "wakeup fired its final time: its ttl has passed");
                }
                self.delete_wakeup(id)?;
            }
        }
        Ok(())
    }

    /// Pending wakeups (of task `task`, or of tasks `owner` owns), oldest first.
    pub(crate) fn pending_wakeups(
        &self,
        task: Option<&str>,
        owner: Option<&str>,
    ) -> Result<Vec<WakeupRecord>> {
        let mut wakeups: Vec<WakeupRecord> = self
            .wakeups()?
            .into_iter()
            .filter(|w| task.is_none_or(|t| w.task_id == t))
            .filter(|w| owner.is_none_or(|o| w.owner == o))
            .collect();
        wakeups.sort_by_key(|w| (w.created_ms, w.id.clone()));
        Ok(wakeups)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn when_takes_the_pages_shape_and_the_shorthand() {
        assert_eq!(
            decode_when(&json!({"kind": "delay_ms", "value": 2000})).unwrap(),
            When::DelayMs(2000)
        );
        assert_eq!(
            decode_when(&json!({"cron": "*/5 * * * *"})).unwrap(),
            When::Cron("*/5 * * * *".into())
        );
        assert!(decode_when(&json!({"kind": "soon", "value": 1})).is_err());
        assert!(decode_when(&json!({})).is_err());
    }
}
