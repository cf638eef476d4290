//! Schedules (`commonagents.info/v1/schedule`, CONTRACT §5) and the one scheduler that fires
//! them and the self-scheduled wakeups.
//!
//! Every schedule creates a new task on every tick, time-driven: a task of an earlier tick
//! still running does not hold the next one back. Each schedule's status (with the last tick
//! fired) is in the store, so a tick missed while the host was down fires once at start,
//! however many were missed ([`Timing::missed`](agentmesh_triggers::Timing::missed)). A tick is
//! recorded as fired before its task is created: a crash in between loses that tick rather
//! than firing it twice.
//!
//! The scheduler is one tokio task ([`Engine::run_scheduler`]) waiting on one
//! [`TimerHandle`](agentmesh_triggers::TimerHandle) for every schedule and wakeup.

use agentmesh_store::event::TriggerEnvelope;
use agentmesh_store::now_ms;
use agentmesh_triggers::clock::rfc3339;
use agentmesh_triggers::ttl::expires_at;
use serde_json::{Value, json};

use crate::triggers::{FireOutcome, FireStatus, SCHEDULE_STATE, SchedulePlan, TimerId};
use crate::{Engine, EngineError, lock, normalize_input};

impl Engine {
    /// Arms every schedule and pending wakeup, firing at once (once) what was missed while the
    /// host was down. Call once at start, before [`run_scheduler`](Self::run_scheduler).
    pub async fn start_scheduler(&self) -> crate::Result<()> {
        self.register_triggers()?;
        self.arm_schedules(true).await?;
        self.arm_wakeups().await
    }

    /// Fires schedules and wakeups as they come due, for ever (abort the task to stop it).
    pub async fn run_scheduler(self) {
        loop {
            let due = self.inner.triggers.timer.next_due().await;
            for d in due {
                match d.id {
                    TimerId::Schedule(id) => self.fire_schedule(&id, d.at_ms).await,
                    TimerId::Wakeup(id) => self.fire_wakeup(&id).await,
                }
            }
        }
    }

    /// Brings the timer in step with the plan's schedules: arms the enabled ones, disarms the
    /// rest. `start`: the host just started, so a tick missed while it was down fires now.
    pub(crate) async fn arm_schedules(&self, start: bool) -> crate::Result<()> {
        let plan = self.plan();
        let now = now_ms();
        let mut keep = std::collections::HashSet::new();
        let mut ids: Vec<&String> = plan.schedules.keys().collect();
        ids.sort();
        for id in ids {
            let Some(s) = plan.schedules.get(id) else {
                continue;
            };
            let status = match self.store().state::<FireStatus>(SCHEDULE_STATE, id)? {
                Some(status) => status,
                None => self.update_status(SCHEDULE_STATE, id, |_| {})?,
            };
            if !s.enabled || status.expired || status.revoked {
                continue;
            }
            keep.insert(id.clone());
            let missed = start
                .then(|| {
                    s.timing
                        .missed(status.last_fired_ms.unwrap_or(status.created_ms), now)
                })
                .flatten();
            if let Some(tick) = missed {
                tracing::info!(schedule.id = %id, "a tick missed while the host was down fires now");
                self.fire_schedule(id, tick).await;
            } else {
                self.arm_schedule(s, &status, now);
            }
        }
        let mut armed = lock(&self.inner.triggers.armed);
        for gone in armed.difference(&keep) {
            self.inner
                .triggers
                .timer
                .disarm(&TimerId::Schedule(gone.clone()));
        }
        *armed = keep;
        Ok(())
    }

    /// Arms `s`'s next tick after `now`; with a `ttl`, no later than its expiry (the final
    /// fire). Returns the deadline.
    fn arm_schedule(&self, s: &SchedulePlan, status: &FireStatus, now: i64) -> Option<i64> {
        let expiry = s.ttl.map(|ttl| expires_at(status.created_ms, ttl));
        let next = match (s.timing.next_after(now), expiry) {
            (Some(next), Some(exp)) => Some(next.min(exp.max(now))),
            (next, _) => next,
        };
        let timer = &self.inner.triggers.timer;
        match next {
            Some(at) => timer.arm(TimerId::Schedule(s.id()), at),
            None => {
                timer.disarm(&TimerId::Schedule(s.id()));
            }
        }
        lock(&self.inner.triggers.armed).insert(s.id());
        next
    }

    /// Fires schedule `id`'s tick `tick_ms`: a new task as the owner with the schedule's
    /// input, then arms the next tick (or, past its `ttl`, deletes it).
    pub(crate) async fn fire_schedule(&self, id: &str, tick_ms: i64) {
        let plan = self.plan();
        let Some(s) = plan.schedules.get(id) else {
            return;
        };
        let now = now_ms();
        let Ok(status) = self.fire_status(SCHEDULE_STATE, id) else {
            return;
        };
        if !s.enabled || status.expired || status.revoked {
            return;
        }
        let last = s
            .ttl
            .is_some_and(|ttl| agentmesh_triggers::ttl::expired(status.created_ms, ttl, now));
        let recorded = self.update_status(SCHEDULE_STATE, id, |st| {
            st.last_fired_ms = Some(tick_ms.max(st.last_fired_ms.unwrap_or(i64::MIN)));
            st.expired |= last;
        });
        let status = match recorded {
            Ok(status) => status,
            Err(e) => {
                tracing::warn!(schedule.id = %id, "recording a tick failed, not fired: {e}");
                return;
            }
        };
        match self.schedule_task(s, now).await {
            Ok(Some(task)) => self.record_fire(SCHEDULE_STATE, id, Ok(&task)),
            Ok(None) => self.record_fire(SCHEDULE_STATE, id, Err(FireOutcome::Dropped)),
            Err(e) => {
                tracing::warn!(schedule.id = %id, "schedule fire failed: {e}");
                self.record_fire(SCHEDULE_STATE, id, Err(FireOutcome::Failed(&e.to_string())));
            }
        }
        if last {
            tracing::info!(schedule.id = %id, "fired its final time: its ttl has passed");
            lock(&self.inner.triggers.armed).remove(id);
        } else {
            self.arm_schedule(s, &status, now);
        }
    }

    /// The task of one tick; `None` when a bound dropped it.
    async fn schedule_task(&self, s: &SchedulePlan, now: i64) -> crate::Result<Option<String>> {
        let agent = self.agent(&s.agent)?;
        let io = normalize_input(&agent, &Value::Object(s.inputs.clone()))?;
        if let Some(why) = self.bound_fire(
            &format!("schedule:{}", s.id()),
            s.max_per_hour,
            &s.owner,
            now,
        ) {
            tracing::info!(schedule.id = %s.id(), "{why}");
            return Ok(None);
        }
        let envelope = TriggerEnvelope {
            source: "schedule".into(),
            fired_at: now,
            schedule_id: Some(s.id()),
            ..TriggerEnvelope::default()
        };
        let (task, input) = self.cold_start(&s.agent, &s.owner, io, envelope).await?;
        self.queue_durably(None, vec![(task.clone(), input)])
            .await?;
        self.kick(&task);
        Ok(Some(task))
    }

    /// The schedules (optionally only those `owner` owns) and, unless `task` names one task,
    /// pending wakeups; each with `next_trigger_at`. `task` lists only that task's wakeups.
    pub fn schedule_objects(
        &self,
        task: Option<&str>,
        owner: Option<&str>,
    ) -> crate::Result<Vec<Value>> {
        let mut out = Vec::new();
        if task.is_none() {
            let plan = self.plan();
            let mut schedules: Vec<_> = plan
                .schedules
                .values()
                .filter(|s| owner.is_none_or(|o| s.owner == o))
                .collect();
            schedules.sort_by_key(|s| s.id());
            for s in schedules {
                let status = self.fire_status(SCHEDULE_STATE, &s.id())?;
                let next = self
                    .inner
                    .triggers
                    .timer
                    .deadline(&TimerId::Schedule(s.id()))
                    .map(rfc3339);
                let mut status_obj = status.object(s.ttl);
                if let Value::Object(m) = &mut status_obj {
                    m.insert("next_trigger_at".into(), json!(next));
                }
                out.push(json!({
                    "id": s.id(),
                    "kind": "schedule",
                    "namespace": s.namespace,
                    "name": s.name,
                    "agent": s.agent,
                    "owner": s.owner,
                    "enabled": s.enabled && !status.revoked && !status.expired,
                    "cron": s.manifest.cron,
                    "timezone": s.manifest.timezone,
                    "interval": s.manifest.interval.map(|d| format!("{}ms", d.0.as_millis())),
                    "at": s.manifest.at,
                    "next_trigger_at": next,
                    "status": status_obj,
                }));
            }
        }
        out.extend(self.wakeup_objects(task, owner)?);
        Ok(out)
    }

    /// The owner of schedule or wakeup `id` (for access checks).
    pub fn schedule_owner(&self, id: &str) -> crate::Result<String> {
        if let Some(s) = self.plan().schedules.get(id) {
            return Ok(s.owner.clone());
        }
        match self.wakeup(id)? {
            Some(w) => Ok(self.task(&w.task_id).map_or(w.owner, |t| t.user.id)),
            None => Err(EngineError::NotFound(format!("schedule `{id}`"))),
        }
    }

    /// Revokes schedule or wakeup `id`: a wakeup is deleted; a schedule of the config dir
    /// stops ticking (its manifest stays; the revocation is kept in the store).
    pub fn revoke_schedule(&self, id: &str) -> crate::Result<()> {
        if self.plan().schedules.contains_key(id) {
            self.update_status(SCHEDULE_STATE, id, |s| s.revoked = true)?;
            self.inner
                .triggers
                .timer
                .disarm(&TimerId::Schedule(id.to_owned()));
            lock(&self.inner.triggers.armed).remove(id);
            return Ok(());
        }
        if self.delete_wakeup(id)? {
            Ok(())
        } else {
            Err(EngineError::NotFound(format!("schedule `{id}`")))
        }
    }
}
