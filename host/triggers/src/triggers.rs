//! Triggers (CONTRACT §1, §3, §5; the Trigger page): an event of a configured source, or an
//! authenticated API call, *cold-starts* a new task for the trigger's agent, running as the
//! trigger's `owner` (never as the sender).
//!
//! - sources, triggers and schedules are compiled with the plan
//!   ([`agentmesh_engine::plan::triggers`]):
//!   `github` and `standard-webhooks` HMAC secrets, or `bearer` tokens kept only as SHA-256
//!   digests and compared in constant time;
//! - [`Engine::deliver_source_webhook`] (`POST /v1/webhooks/sources/{source}`) and
//!   [`Engine::fire_trigger`] (`POST /v1/triggers/{ns}/{name}/fire`): signature, delivery-id
//!   dedupe (shared with tool webhooks), `source.before` asserts over the raw payload, the
//!   `message` template, the bounds, one new task per passing trigger;
//! - the bounds every fire passes: the per-trigger [`Throttle`] (excess dropped and recorded,
//!   never queued), the per-user [`DailyQuota`] of trigger-fired turns, and `ttl` (a fire at or
//!   past it is the final one);
//! - [`FireStatus`]: the read-only status of a trigger or schedule, kept in the store.
//!
//! Schedules are driven by `schedules`, self-scheduled wakeups by `wakeups`.

use std::collections::hash_map::Entry;
use std::sync::Arc;

use agentmesh_expr::{Activation, Bound};
use agentmesh_model::delivery::{Headers, Inbound, Proof};
use agentmesh_store::Typed;
use agentmesh_store::{now_ms, now_rfc3339};
use agentmesh_timing::{DailyQuota, Throttle};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use agentmesh_engine::plan::triggers::{
    DEFAULT_TRIGGERED_TURNS_PER_USER_PER_DAY, SourcePlan, TriggerPlan,
};
use agentmesh_engine::{
    Admitted, Arrival, Delivered, EngineError, Entrance, Input, NewTask, Origin, ResourceUpdate,
    Run, Through, UserRef, WebhookError, normalize_trigger_input,
};

use crate::{Result, Triggers, lock};

/// The store namespace of trigger statuses.
pub(crate) const TRIGGER_STATE: &str = "trigger";
/// The store namespace of schedule statuses.
pub(crate) const SCHEDULE_STATE: &str = "schedule";
/// The store namespace of throttles: the fires let through in the last hour, by throttle key.
const THROTTLE_STATE: &str = "throttle";
/// The store namespace of the daily quota: each owner's triggered turns on its last day.
const QUOTA_STATE: &str = "quota";

/// A throttle's fires in the store, epoch ms, oldest first (at most its limit).
#[derive(Serialize, Deserialize)]
struct ThrottleRecord {
    recent: Vec<i64>,
}

/// An owner's triggered turns in the store.
#[derive(Serialize, Deserialize)]
struct QuotaRecord {
    /// The UTC day they were taken on ([`DailyQuota::day_of`]).
    day: i64,
    /// How many.
    used: u32,
}

/// The read-only status of a trigger or schedule (the spec's fields, plus this host's
/// `dropped` count), persisted in the store.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FireStatus {
    /// The last fire that created a task, RFC 3339.
    pub last_triggered_at: Option<String>,
    /// The task it created.
    pub last_task_id: Option<String>,
    /// Fires that created a task.
    pub total_triggers: u64,
    /// Fires that failed since the last one that did not.
    pub consecutive_failures: u64,
    /// Why the last failure failed.
    pub last_error: Option<String>,
    /// Fires dropped by the throttle or the daily quota (never queued).
    #[serde(default)]
    pub dropped: u64,
    /// When the host first loaded it, epoch ms (its `ttl` counts from here).
    #[serde(default)]
    pub created_ms: i64,
    /// The last tick fired (schedules), epoch ms: a tick after it missed while the host was
    /// down fires once at start.
    #[serde(default)]
    pub last_fired_ms: Option<i64>,
    /// It fired its final time at its `ttl` and is gone.
    #[serde(default)]
    pub expired: bool,
    /// Revoked through the API.
    #[serde(default)]
    pub revoked: bool,
}

/// A trigger as the API shows it: its plan and its status.
#[derive(Clone)]
pub struct TriggerView {
    /// The compiled manifest.
    pub plan: Arc<TriggerPlan>,
    /// Its read-only status.
    pub status: FireStatus,
}

/// What became of a source delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceDelivery {
    /// Durably queued: the tasks created (none when no trigger passed), and how many fires
    /// the bounds dropped.
    Accepted {
        /// The new tasks.
        tasks: Vec<String>,
        /// Fires dropped by a throttle or the daily quota.
        dropped: u64,
    },
    /// A repeat of a delivery id seen within the dedupe window: nothing was created.
    Duplicate,
}

/// Why an API fire was refused.
#[derive(Debug, thiserror::Error)]
pub enum FireError {
    /// No such trigger.
    #[error("no trigger `{0}`")]
    NotFound(String),
    /// A missing or wrong token, or a trigger whose source is not a `bearer` one.
    #[error("{0}")]
    Unauthorized(String),
    /// Over the trigger's hourly cap or its owner's daily quota: dropped and recorded.
    #[error("{0}")]
    Throttled(String),
    /// The trigger is disabled or expired, or `source.before` refused the call.
    #[error("{0}")]
    Refused(String),
    /// The body is not a JSON object, or the input does not fit the agent.
    #[error("{0}")]
    BadRequest(String),
    /// A repeat of a delivery id: nothing was created.
    #[error("duplicate delivery")]
    Duplicate,
    /// The host failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What a source's delivery fired.
#[derive(Default)]
struct SourceFires {
    /// The inputs of the tasks it cold-started.
    inputs: Vec<Input>,
    /// The fires that created a task: (trigger, task).
    fired: Vec<(String, String)>,
    /// How many fires were dropped (throttle, quota).
    dropped: u64,
    /// The final fires among them (their triggers' `ttl` has passed).
    finals: Vec<FinalFire>,
}

/// The tasks an arrival cold-started (see [`Triggers::arrive_starting`]).
#[derive(Default)]
struct ColdStarts(std::sync::Mutex<Vec<String>>);

/// A trigger's final fire (its `ttl` has passed) while it is under way: no other fire of the
/// trigger takes it meanwhile. [`FinalFire::done`] once its input is on disk marks the
/// trigger expired; dropped without that (the fire failed, or the door could not queue it),
/// it leaves the trigger as it was, its final fire still to come.
pub(crate) struct FinalFire {
    firing: Arc<crate::Firing>,
    id: String,
}

impl FinalFire {
    /// Marks the trigger expired: its final fire is on disk.
    fn done(self, triggers: &Triggers) {
        if let Err(e) = triggers.update_status(TRIGGER_STATE, &self.id, |s| s.expired = true) {
            tracing::warn!(trigger.id = %self.id, "marking expired failed: {e}");
        }
        tracing::info!(trigger.id = %self.id, "fired its final time: its ttl has passed");
    }
}

impl Drop for FinalFire {
    fn drop(&mut self) {
        lock(&self.firing.finals).remove(&self.id);
    }
}

/// Whether a trigger takes an event.
enum Admit {
    /// It does: the normalized input of the new task.
    Ready(Value),
    /// It does not (disabled, expired, `source.before`): why.
    Skipped(String),
    /// A bound dropped the fire: why.
    Dropped(String),
    /// The fire failed (a message that cannot render, input the agent refuses): why.
    Failed(String),
}

impl Triggers {
    /// The bounds of one fire at `now`: the throttle of `key`, then `owner`'s daily quota.
    /// `Some(reason)` when the fire is dropped. Both counts are kept in the store, so they
    /// hold across a restart: read on first use, written (not flushed) when a fire passes, so
    /// they are durable with the flush that queues the fire's input. A count that cannot be
    /// read is not zero: the fire fails (`Err`; nothing is kept of the read, so the next fire
    /// reads it again) rather than pass a bound it may be over.
    pub(crate) fn bound_fire(
        &self,
        key: &str,
        max_per_hour: u32,
        owner: &str,
        now: i64,
    ) -> Result<Option<String>> {
        {
            let mut throttles = lock(&self.firing.throttles);
            let entry = match throttles.entry(key.to_owned()) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(slot) => {
                    let stored = self
                        .engine
                        .store()
                        .state::<ThrottleRecord>(THROTTLE_STATE, key)?;
                    let recent = stored.map(|r| r.recent).unwrap_or_default();
                    slot.insert((max_per_hour, Throttle::resume(max_per_hour, recent)))
                }
            };
            if entry.0 != max_per_hour {
                *entry = (
                    max_per_hour,
                    Throttle::resume(max_per_hour, entry.1.recent()),
                );
            }
            if !entry.1.allow(now) {
                return Ok(Some(format!(
                    "`{key}` is over its limit of {max_per_hour} fires per hour; the fire was dropped"
                )));
            }
            let record = ThrottleRecord {
                recent: entry.1.recent().collect(),
            };
            self.keep(THROTTLE_STATE, key, &record);
        }
        let per_day = self
            .engine
            .plan()
            .host
            .policy
            .triggered_turns_per_user_per_day
            .unwrap_or(DEFAULT_TRIGGERED_TURNS_PER_USER_PER_DAY);
        let mut quota = lock(&self.firing.quota);
        let q = match &mut *quota {
            Some((limit, q)) if *limit == per_day => q,
            slot => &mut slot.insert((per_day, DailyQuota::new(per_day))).1,
        };
        if q.used(owner, now) == 0
            && let Some(stored) = self
                .engine
                .store()
                .state::<QuotaRecord>(QUOTA_STATE, owner)?
        {
            q.resume(owner, stored.day, stored.used);
        }
        if !q.take(owner, now) {
            return Ok(Some(format!(
                "`{owner}` has used its {per_day} trigger-fired turns for today; the fire was dropped"
            )));
        }
        let record = QuotaRecord {
            day: DailyQuota::day_of(now),
            used: q.used(owner, now),
        };
        self.keep(QUOTA_STATE, owner, &record);
        Ok(None)
    }

    /// Gives back what [`bound_fire`](Self::bound_fire) took for a fire of `key` by `owner`
    /// at `now` that did not happen after all (another host sharing the store fired it).
    pub(crate) fn unbound_fire(&self, key: &str, owner: &str, now: i64) {
        if let Some((_, throttle)) = lock(&self.firing.throttles).get_mut(key) {
            throttle.give_back();
            let record = ThrottleRecord {
                recent: throttle.recent().collect(),
            };
            self.keep(THROTTLE_STATE, key, &record);
        }
        if let Some((_, q)) = &mut *lock(&self.firing.quota) {
            q.give_back(owner, now);
            let record = QuotaRecord {
                day: DailyQuota::day_of(now),
                used: q.used(owner, now),
            };
            self.keep(QUOTA_STATE, owner, &record);
        }
    }

    /// Forgets the throttle of `key` (a wakeup being deleted), in memory and in the store
    /// (durable with the caller's next flush).
    pub(crate) fn forget_throttle(&self, key: &str) -> Result<()> {
        lock(&self.firing.throttles).remove(key);
        Ok(self
            .engine
            .store()
            .delete_state_buffered(THROTTLE_STATE, key)?)
    }

    /// Writes host state `key` in `ns` without flushing; a write error is logged.
    fn keep(&self, ns: &str, key: &str, value: &impl Serialize) {
        if let Err(e) = self.engine.store().save_state_buffered(ns, key, value) {
            tracing::warn!(
                state.ns = ns,
                state.key = key,
                "keeping a fire count failed: {e}"
            );
        }
    }

    /// The status of trigger or schedule `id` in store namespace `ns`.
    pub(crate) fn fire_status(&self, ns: &str, id: &str) -> Result<FireStatus> {
        Ok(self.engine.store().state(ns, id)?.unwrap_or_default())
    }

    /// Changes the status of `id` in `ns` durably; creates it (created now) when absent.
    pub(crate) fn update_status(
        &self,
        ns: &str,
        id: &str,
        change: impl FnOnce(&mut FireStatus),
    ) -> Result<FireStatus> {
        let status = self.change_status(ns, id, change)?;
        self.engine.flush()?;
        Ok(status)
    }

    /// Like [`update_status`](Self::update_status), durable only with the next flush: several
    /// changes can share one. Only the read-modify-write is serialized, not that flush.
    pub(crate) fn change_status(
        &self,
        ns: &str,
        id: &str,
        change: impl FnOnce(&mut FireStatus),
    ) -> Result<FireStatus> {
        let _serial = lock(&self.firing.state);
        let mut status: FireStatus =
            self.engine
                .store()
                .state(ns, id)?
                .unwrap_or_else(|| FireStatus {
                    created_ms: now_ms(),
                    ..FireStatus::default()
                });
        change(&mut status);
        self.engine.store().save_state_buffered(ns, id, &status)?;
        Ok(status)
    }

    /// Runs `work` (store writes that wait for an fsync) on tokio's blocking pool.
    pub(crate) async fn off_workers<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Triggers) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let triggers = self.clone();
        tokio::task::spawn_blocking(move || work(&triggers))
            .await
            .map_err(|e| EngineError::Internal(format!("a store write did not finish: {e}")))?
    }

    /// Records a fire's outcome: a task created, a drop, or a failure.
    pub(crate) fn record_fire(
        &self,
        ns: &str,
        id: &str,
        outcome: std::result::Result<&str, FireOutcome<'_>>,
    ) {
        if let Err(e) = self.update_status(ns, id, fire_recorded(outcome)) {
            tracing::warn!(trigger.id = %id, "recording a fire failed: {e}");
        }
    }

    /// Creates the task of a cold start, without input, noted in `started`: the caller queues
    /// its input through the door, with the arrival's other inputs (see
    /// [`Triggers::arrive_starting`]).
    async fn cold_start(&self, agent: &str, owner: &str, started: &ColdStarts) -> Result<String> {
        let new = NewTask {
            agent: agent.to_owned(),
            input: None,
            user: UserRef {
                id: owner.to_owned(),
                email: None,
            },
        };
        let id = self.engine.create_task(new, Run::Background).await?.id;
        lock(&started.0).push(id.clone());
        Ok(id)
    }

    /// [`Engine::arrive`] for fires that cold-start tasks (`admit` notes them in the list it
    /// is given): when the arrival fails (a fire failed, or the door could not queue the
    /// inputs), the tasks it started are deleted again — the sender is told the fire failed,
    /// nobody knows their ids, and they must not live on without input (subscribed to events,
    /// running turns on them), as [`Engine::create_task`] does with a task whose first input
    /// cannot be queued.
    async fn arrive_starting<T, E: From<EngineError>>(
        &self,
        delivered: Delivered<'_>,
        admit: impl AsyncFnOnce(&Arrival<'_>, &ColdStarts) -> std::result::Result<Admitted<T>, E>,
    ) -> std::result::Result<Through<T>, E> {
        let started = ColdStarts::default();
        let admit = async |arrival: &Arrival<'_>| admit(arrival, &started).await;
        let through = self.engine.arrive(delivered, admit).await;
        if through.is_err() {
            let tasks = std::mem::take(&mut *lock(&started.0));
            for task in tasks {
                if let Err(e) = self.engine.delete_task(&task).await {
                    tracing::error!(task.id = %task, "a task started by a fire that failed could not be deleted: {e}");
                }
            }
        }
        through
    }

    /// Whether trigger `t` takes `event`, and the new task's input if so. `fields` are an API
    /// fire's (its body, the event's payload): their `message` is the task's when the trigger
    /// has no `message` template, and the others are parameter values laid over the
    /// trigger's `inputs`. They are taken out of the payload once `event` has been read, not
    /// copied: the body's JSON stays one tree. `Err` when its fire counts cannot be read
    /// ([`Triggers::bound_fire`]).
    fn admit_trigger(
        &self,
        t: &TriggerPlan,
        status: &FireStatus,
        event: Bound,
        fields: Option<Bound>,
        now: i64,
    ) -> Result<Admit> {
        if !t.enabled {
            return Ok(Admit::Skipped(format!("trigger `{}` is disabled", t.id())));
        }
        if status.expired || status.revoked {
            return Ok(Admit::Skipped(format!("trigger `{}` has expired", t.id())));
        }
        let mut act = Activation::new();
        act.bind("event", event).set("now", json!(now_rfc3339()));
        for step in &t.before {
            // A condition that cannot be evaluated runs its step (fail closed).
            if let Some(cond) = &step.condition
                && matches!(cond.evaluate_bool(&act), Ok(false))
            {
                continue;
            }
            let passed = match step.expr.evaluate_bool(&act) {
                Ok(pass) => pass,
                Err(e) => {
                    tracing::debug!(trigger.id = %t.id(), "source.before `{}` failed: {e}", step.expr.source());
                    false
                }
            };
            if !passed {
                return Ok(Admit::Skipped(step.error_message.clone().unwrap_or_else(
                    || {
                        format!(
                            "`source.before` refused the event: `{}`",
                            step.expr.source()
                        )
                    },
                )));
            }
        }
        let agent = match self.engine.agent(&t.agent) {
            Ok(a) => a,
            Err(e) => return Ok(Admit::Failed(e.to_string())),
        };
        let mut io = t.inputs.clone();
        if let Some(tpl) = &t.message {
            match tpl.render(&act) {
                Ok(text) => {
                    io.insert("message".into(), Value::String(text));
                }
                Err(e) => {
                    return Ok(Admit::Failed(format!(
                        "the message `{}` cannot be rendered: {e}",
                        tpl.source()
                    )));
                }
            }
        }
        // The event is read: what the payload holds is the caller's alone now.
        drop(act);
        let fields = match fields.map(Bound::into_json).transpose() {
            Ok(Some(Value::Object(fields))) => fields,
            // A source's delivery sets no parameter; an API fire's body is an object (checked
            // as it arrives).
            Ok(_) => Map::new(),
            Err(e) => return Ok(Admit::Failed(format!("the body cannot be read: {e}"))),
        };
        // The caller's fields naming a parameter of the agent that the trigger's `inputs`
        // leave open set it (what the trigger's owner fixed, a caller cannot change).
        let declared = agent.parameters.as_ref().map(|p| &p.properties);
        for (k, v) in fields {
            let open = match k.as_str() {
                "message" => t.message.is_none(),
                k => declared.is_some_and(|d| d.contains_key(k)) && !t.inputs.contains_key(k),
            };
            if open {
                io.insert(k, v);
            }
        }
        let io = match normalize_trigger_input(&agent, Value::Object(io)) {
            Ok(io) => io,
            Err(e) => return Ok(Admit::Failed(e.to_string())),
        };
        let key = format!("trigger:{}", t.id());
        Ok(
            match self.bound_fire(&key, t.max_per_hour, &t.owner, now)? {
                Some(why) => Admit::Dropped(why),
                None => Admit::Ready(io),
            },
        )
    }

    /// Whether this fire of trigger `t` (of `status`) is its final one (its `ttl` has passed
    /// at `now`): `Ok(Some)` holds it while it is under way (see [`FinalFire`]); `Err` says
    /// why it cannot fire: another fire holds its final one.
    fn final_fire(
        &self,
        t: &TriggerPlan,
        status: &FireStatus,
        now: i64,
    ) -> std::result::Result<Option<FinalFire>, String> {
        let Some(ttl) = t.ttl else { return Ok(None) };
        if !agentmesh_timing::ttl::expired(status.created_ms, ttl, now) {
            return Ok(None);
        }
        let id = t.id();
        if !lock(&self.firing.finals).insert(id.clone()) {
            return Err(format!("trigger `{id}` is firing its final time"));
        }
        let firing = Arc::clone(&self.firing);
        Ok(Some(FinalFire { firing, id }))
    }

    /// `POST /v1/webhooks/sources/{source}`: authenticates the delivery with the source, and
    /// creates one task per enabled trigger of that source whose `source.before` passes. A 2xx
    /// may be answered once this returns `Ok`: what was queued is on disk.
    pub async fn deliver_source_webhook(
        &self,
        source: &str,
        delivery: Inbound<'_>,
    ) -> std::result::Result<SourceDelivery, WebhookError> {
        let Inbound { headers, body } = delivery;
        let plan = self.engine.plan();
        let src = plan
            .sources
            .get(source)
            .ok_or_else(|| WebhookError::UnknownSource(source.to_owned()))?;
        let auth_subject = src
            .authenticate(delivery)
            .map_err(|e| WebhookError::Unauthorized(e.0))?;
        let payload = serde_json::from_slice(body)
            .map(Bound::new)
            .map_err(|e| WebhookError::NotJson(e.to_string()))?;
        // While the delivery id is held at the door: every trigger of the source that takes
        // the event creates its task. Its id is remembered even when none does.
        let admit = async |arrival: &Arrival<'_>, started: &ColdStarts| {
            let name = headers
                .text("x-github-event")
                .and_then(Result::ok)
                .unwrap_or(source);
            let event = arrival.event(name, &payload);
            let origin = Origin::Webhook { auth_subject };
            let fires = self.fire_source(source, &event, (arrival.fired_at(), origin), started);
            let fires = fires.await?;
            let outcome = (fires.fired, fires.dropped, fires.finals);
            Ok::<_, WebhookError>(Admitted::Inputs(fires.inputs, outcome))
        };
        let delivered = Delivered::new(headers, src.proof(), Entrance::Source(source));
        let (fired, dropped, finals) = match self.arrive_starting(delivered, admit).await? {
            Through::Duplicate => return Ok(SourceDelivery::Duplicate),
            Through::Queued { admitted, .. } | Through::Nothing(admitted) => admitted,
        };
        let tasks = self.settle(fired, finals);
        Ok(SourceDelivery::Accepted { tasks, dropped })
    }

    /// Fires the triggers of every `mcp-event` source naming one of the events of `update`'s
    /// tool that subscribe to its resource: the event's payload is `{"uri"}`, the trigger
    /// source `mcp-event`. Returns the tasks created (their input on disk).
    pub async fn deliver_mcp_update(&self, update: &ResourceUpdate) -> Result<Vec<String>> {
        let plan = self.engine.plan();
        let mut sources: Vec<(&String, &String)> = plan
            .sources
            .iter()
            .filter_map(|(name, source)| match &**source {
                SourcePlan::Mcp { tool, event }
                    if *tool == update.tool && update.events.contains(event) =>
                {
                    Some((name, event))
                }
                _ => None,
            })
            .collect();
        if sources.is_empty() {
            return Ok(Vec::new());
        }
        sources.sort();
        let payload = Bound::new(json!({"uri": update.uri}));
        let admit = async |arrival: &Arrival<'_>, started: &ColdStarts| {
            let mut all = SourceFires::default();
            for (source, event) in &sources {
                let event = arrival.event(event, &payload);
                let fired = (arrival.fired_at(), Origin::McpEvent);
                let fires = self.fire_source(source, &event, fired, started).await?;
                all.inputs.extend(fires.inputs);
                all.fired.extend(fires.fired);
                all.dropped += fires.dropped;
                all.finals.extend(fires.finals);
            }
            Ok::<_, EngineError>(Admitted::Inputs(all.inputs, (all.fired, all.finals)))
        };
        // No delivery id: an update is never a repeat of another.
        let (fired, finals) = match self
            .arrive_starting(Delivered::unnamed(&Headers::default()), admit)
            .await?
        {
            Through::Duplicate => (Vec::new(), Vec::new()),
            Through::Queued { admitted, .. } | Through::Nothing(admitted) => admitted,
        };
        Ok(self.settle(fired, finals))
    }

    /// Records fires whose input is on disk, `fired` as (trigger, task), and marks the
    /// triggers of `finals` expired. Returns the tasks.
    fn settle(&self, fired: Vec<(String, String)>, finals: Vec<FinalFire>) -> Vec<String> {
        for last in finals {
            last.done(self);
        }
        fired
            .into_iter()
            .map(|(id, task)| {
                self.record_fire(TRIGGER_STATE, &id, Ok(&task));
                task
            })
            .collect()
    }

    /// Fires every trigger of `source` that takes `event` (in id order): each passing one
    /// cold-starts its task; skips, drops and failures are recorded.
    async fn fire_source(
        &self,
        source: &str,
        event: &Bound,
        (fired_at, origin): (i64, Origin),
        started: &ColdStarts,
    ) -> Result<SourceFires> {
        let plan = self.engine.plan();
        let mut triggers: Vec<&Arc<TriggerPlan>> = plan
            .triggers
            .values()
            .filter(|t| t.source == source)
            .collect();
        triggers.sort_by_key(|t| t.id());
        let mut fires = SourceFires::default();
        for t in triggers {
            let id = t.id();
            let status = self.fire_status(TRIGGER_STATE, &id)?;
            let io = match self.admit_trigger(t, &status, event.clone(), None, fired_at)? {
                Admit::Ready(io) => io,
                Admit::Skipped(why) => {
                    tracing::debug!(trigger.id = %id, "trigger skipped: {why}");
                    continue;
                }
                Admit::Dropped(why) => {
                    tracing::info!(trigger.id = %id, "{why}");
                    fires.dropped += 1;
                    self.record_fire(TRIGGER_STATE, &id, Err(FireOutcome::Dropped));
                    continue;
                }
                Admit::Failed(why) => {
                    tracing::warn!(trigger.id = %id, "trigger failed: {why}");
                    self.record_fire(TRIGGER_STATE, &id, Err(FireOutcome::Failed(&why)));
                    continue;
                }
            };
            let last = match self.final_fire(t, &status, fired_at) {
                Ok(last) => last,
                Err(why) => {
                    tracing::debug!(trigger.id = %id, "trigger skipped: {why}");
                    continue;
                }
            };
            match self.cold_start(&t.agent, &t.owner, started).await {
                Ok(task) => {
                    fires
                        .inputs
                        .push(Input::new(task.clone(), io, origin.clone()));
                    fires.fired.push((id, task));
                    fires.finals.extend(last);
                }
                Err(e) => {
                    let why = e.to_string();
                    self.record_fire(TRIGGER_STATE, &id, Err(FireOutcome::Failed(&why)));
                }
            }
        }
        Ok(fires)
    }

    /// `POST /v1/triggers/{ns}/{name}/fire`: authenticated with a token of the trigger's
    /// `bearer` source (recorded as `auth_subject`); the body is `{"message": …, …}` and is
    /// the event's payload for `source.before` and the `message` template. Its `message`
    /// is the task's when the trigger has no template; its fields naming a parameter of the
    /// agent set that parameter (over the trigger's `inputs`). Returns the
    /// new task's id once its input is on disk.
    pub async fn fire_trigger(
        &self,
        id: &str,
        delivery: Inbound<'_>,
    ) -> std::result::Result<String, FireError> {
        let Inbound { headers, body } = delivery;
        let plan = self.engine.plan();
        let t = plan
            .triggers
            .get(id)
            .ok_or_else(|| FireError::NotFound(id.to_owned()))?;
        let auth_subject = match plan.sources.get(&t.source).map(AsRef::as_ref) {
            Some(src @ SourcePlan::Bearer(_)) => src
                .authenticate(delivery)
                .map_err(|e| FireError::Unauthorized(e.0))?,
            _ => {
                return Err(FireError::Unauthorized(format!(
                    "trigger `{id}` cannot be fired over the API: its source `{}` is not a `bearer` source",
                    t.source
                )));
            }
        };
        let payload: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body)
                .map_err(|e| FireError::BadRequest(format!("the body is not JSON: {e}")))?
        };
        if !payload.is_object() {
            return Err(FireError::BadRequest(
                "the body must be a JSON object `{\"message\": …, …params}`".into(),
            ));
        }
        // The event's payload, whose fields the trigger takes for the task's input once it
        // has read the event.
        let payload = Bound::new(payload);
        // While the delivery id is held at the door: the trigger takes the call or refuses it
        // (a refusal leaves the id unremembered).
        let admit = async move |arrival: &Arrival<'_>, started: &ColdStarts| {
            let origin = Origin::Api { auth_subject };
            let event = arrival.event("api", &payload);
            let fired_at = arrival.fired_at();
            let status = self.fire_status(TRIGGER_STATE, id)?;
            let io = match self.admit_trigger(t, &status, event, Some(payload), fired_at)? {
                Admit::Ready(io) => io,
                Admit::Skipped(why) => return Err(FireError::Refused(why)),
                Admit::Dropped(why) => {
                    self.record_fire(TRIGGER_STATE, id, Err(FireOutcome::Dropped));
                    return Err(FireError::Throttled(why));
                }
                Admit::Failed(why) => {
                    self.record_fire(TRIGGER_STATE, id, Err(FireOutcome::Failed(&why)));
                    return Err(FireError::BadRequest(why));
                }
            };
            let last = self
                .final_fire(t, &status, fired_at)
                .map_err(FireError::Refused)?;
            let task = self.cold_start(&t.agent, &t.owner, started).await?;
            let input = Input::new(task.clone(), io, origin);
            Ok::<_, FireError>(Admitted::Inputs(vec![input], (task, last)))
        };
        // A token's holder names its own delivery ids, for this trigger only.
        let delivered = Delivered::new(headers, Proof::Unsigned, Entrance::Trigger(id));
        match self.arrive_starting(delivered, admit).await? {
            Through::Duplicate => Err(FireError::Duplicate),
            Through::Queued {
                admitted: (task, last),
                ..
            } => {
                self.settle(vec![(id.to_owned(), task.clone())], Vec::from_iter(last));
                Ok(task)
            }
            Through::Nothing(_) => Err(FireError::Refused("nothing was admitted".into())),
        }
    }

    /// The triggers (optionally only those `owner` owns), with their read-only status, sorted
    /// by id.
    pub fn triggers(&self, owner: Option<&str>) -> Result<Vec<TriggerView>> {
        let plan = self.engine.plan();
        let mut triggers: Vec<&Arc<TriggerPlan>> = plan
            .triggers
            .values()
            .filter(|t| owner.is_none_or(|o| t.owner == o))
            .collect();
        triggers.sort_by_key(|t| t.id());
        triggers.into_iter().map(|t| self.trigger_view(t)).collect()
    }

    /// Trigger `id` with its read-only status.
    pub fn trigger(&self, id: &str) -> Result<TriggerView> {
        let plan = self.engine.plan();
        let t = plan
            .triggers
            .get(id)
            .ok_or_else(|| EngineError::NotFound(format!("trigger `{id}`")))?;
        self.trigger_view(t)
    }

    fn trigger_view(&self, t: &Arc<TriggerPlan>) -> Result<TriggerView> {
        Ok(TriggerView {
            status: self.fire_status(TRIGGER_STATE, &t.id())?,
            plan: Arc::clone(t),
        })
    }

    /// Gives every trigger with a `ttl` its creation time (the first time this host saw it),
    /// so its lifetime counts from there.
    pub(crate) fn register_triggers(&self) -> Result<()> {
        let plan = self.engine.plan();
        for t in plan.triggers.values().filter(|t| t.ttl.is_some()) {
            if self
                .engine
                .store()
                .state::<FireStatus>(TRIGGER_STATE, &t.id())?
                .is_none()
            {
                self.update_status(TRIGGER_STATE, &t.id(), |_| {})?;
            }
        }
        Ok(())
    }
}

/// A fire that created no task.
#[derive(Clone, Copy)]
pub(crate) enum FireOutcome<'a> {
    /// A bound dropped it.
    Dropped,
    /// It failed, for this reason.
    Failed(&'a str),
}

/// The change a fire's outcome makes to its status: a task created, a drop, or a failure.
pub(crate) fn fire_recorded(
    outcome: std::result::Result<&str, FireOutcome<'_>>,
) -> impl FnOnce(&mut FireStatus) + Send + 'static {
    // Owned, for a status change made on another thread: `Err(None)` is a drop.
    let outcome = outcome.map(str::to_owned).map_err(|o| match o {
        FireOutcome::Dropped => None,
        FireOutcome::Failed(why) => Some(why.to_owned()),
    });
    move |s| match outcome {
        Ok(task) => {
            s.last_triggered_at = Some(now_rfc3339());
            s.last_task_id = Some(task);
            s.total_triggers += 1;
            s.consecutive_failures = 0;
        }
        Err(None) => s.dropped += 1,
        Err(Some(why)) => {
            s.consecutive_failures += 1;
            s.last_error = Some(why);
        }
    }
}
