//! Schedules (`commonagents.info/v1/schedule`, CONTRACT §5) and the one scheduler that fires
//! them and the self-scheduled wakeups.
//!
//! Every schedule creates a new task on every tick, time-driven: a task of an earlier tick
//! still running does not hold the next one back. Each schedule's status (with the last tick
//! fired) is in the store, so a tick missed while the host was down fires once at start,
//! however many were missed (the latest of them,
//! [`Timing::latest_missed`](agentmesh_timing::Timing::latest_missed)), and so does one a
//! running host missed while it ran behind: behind by less than a period, it loses none. A
//! tick is
//! recorded as fired before its input is queued: a crash in between loses that tick rather
//! than firing it twice. Its input is queued for a new task id, and the task's runner makes
//! the task from the schedule (`Engine::adopt`), so that queueing is the only write a fire
//! must get done: on a store hosts share, each tick is claimed in that same write, and a host
//! that dies after it leaves the tick's input to the host that takes its tasks over.
//!
//! The scheduler is one tokio task ([`Triggers::run`]) waiting on one
//! [`TimerHandle`](agentmesh_timing::TimerHandle) for every schedule and wakeup. It fires
//! what is due concurrently and never blocks on a fire: the ticks due together as one batch
//! (`fire_schedules`, three fsyncs whatever its size, so a burst due at one instant
//! is not fired one fsync after another), each wakeup on its own. One schedule never fires
//! twice at once, nor do two wakeups of one task: their inputs join its queue in due order.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use std::sync::Arc;

use agentmesh_store::Typed;
use agentmesh_store::now_ms;
use agentmesh_timing::ttl::expires_at;
use serde_json::Value;
use tokio::task::JoinSet;

use agentmesh_engine::plan::{Plan, SchedulePlan};
use agentmesh_engine::{Accepted, Arrival, EngineError, Input, Origin, Run, normalize_input};

use crate::triggers::{FireOutcome, FireStatus, SCHEDULE_STATE, fire_recorded};
use crate::wakeups::WakeupRecord;
use crate::{Result, TimerId, Triggers, lock};

/// How many schedule ticks may be firing at once, in one batch or several. A fire mostly waits
/// for the store, which performs writes one at a time (a flush holds back every transaction),
/// so single fires side by side barely overlap: the ticks due together fire as one batch, with
/// three fsyncs in all, and their tasks' turns start once the whole batch is queued, so that
/// they do not slow the creation of the rest of a burst (measured: a burst of 1,000 queued in
/// ~0.1 s as one batch, in ~0.8 s as batches of 64). The bound keeps a batch in check:
/// creating its tasks takes ~0.1 ms each (so ~0.1 s, the longest its first tick waits for
/// the others), and a crash in the middle loses at most this many ticks (recorded as fired,
/// not yet queued; never fired twice).
const MAX_TICKS_IN_FLIGHT: usize = 1_024;

/// How many wakeups may be firing at once, each on its own: its writes wait for fsyncs on a
/// thread of tokio's blocking pool (512 threads), which 64 leaves mostly to webhooks and
/// component loads.
const MAX_WAKEUPS_IN_FLIGHT: usize = 64;

/// Due fires not started yet, by lane (what must not fire twice at once: a schedule, or the
/// wakeups of one task): at most one in flight per lane, lanes started in the order they came
/// due, each lane's fires in due order.
struct Backlog<L, T> {
    /// Lanes with nothing in flight and something waiting, oldest first.
    ready: VecDeque<L>,
    /// Every lane with a fire in flight or waiting: whether one is in flight, and what waits.
    lanes: HashMap<L, (bool, VecDeque<T>)>,
}

impl<L, T> Default for Backlog<L, T> {
    fn default() -> Self {
        Backlog {
            ready: VecDeque::new(),
            lanes: HashMap::new(),
        }
    }
}

impl<L: Clone + Eq + Hash, T> Backlog<L, T> {
    /// `item` came due in `lane`.
    fn push(&mut self, lane: L, item: T) {
        let (busy, waiting) = self.lanes.entry(lane.clone()).or_default();
        if !*busy && waiting.is_empty() {
            self.ready.push_back(lane);
        }
        waiting.push_back(item);
    }

    /// The next fire to start; its lane is in flight until [`finish`](Self::finish).
    fn start(&mut self) -> Option<(L, T)> {
        let lane = self.ready.pop_front()?;
        let (busy, waiting) = self.lanes.get_mut(&lane)?;
        let item = waiting.pop_front()?;
        *busy = true;
        Some((lane, item))
    }

    /// `lane`'s fire in flight is done.
    fn finish(&mut self, lane: &L) {
        let Some((busy, waiting)) = self.lanes.get_mut(lane) else {
            return;
        };
        *busy = false;
        if waiting.is_empty() {
            self.lanes.remove(lane);
        } else {
            self.ready.push_back(lane.clone());
        }
    }
}

/// A schedule tick recorded as fired.
struct Recorded {
    schedule: Arc<SchedulePlan>,
    /// Its status, the tick recorded.
    status: FireStatus,
    /// Its `ttl` has passed: this fire is its final one.
    last: bool,
    /// The tick (epoch ms).
    tick_ms: i64,
    /// What its fire does.
    tick: Tick,
}

impl Recorded {
    /// What claims the tick among hosts sharing the store (`tick:{id}:{tick_ms}`).
    fn claim(&self) -> String {
        format!("tick:{}:{}", self.schedule.id(), self.tick_ms)
    }
}

/// What a tick's fire does.
enum Tick {
    /// Queues this input for a new task.
    Queue(Input),
    /// Nothing: a bound dropped it.
    Dropped,
    /// Nothing: it failed, for this reason.
    Failed(String),
}

/// How a tick's fire went.
enum Outcome {
    /// Its input was queued for this task.
    Fired(String),
    /// A bound dropped it.
    Dropped,
    /// It failed, for this reason.
    Failed(String),
    /// Another host sharing the store claimed it first, and fires it.
    Elsewhere,
}

/// The schedule whose tick queued `input`.
fn schedule_of(input: &Input) -> String {
    match &input.origin {
        Origin::Schedule { id } => id.clone(),
        _ => String::new(),
    }
}

/// A fire in flight: a batch of schedule ticks (by schedule id), or a wakeup (by its task).
enum Fire {
    Ticks(Vec<String>),
    Wakeup(String),
}

/// A schedule as the API shows it: its plan, its status and its next tick.
#[derive(Clone)]
pub struct ScheduleView {
    /// The compiled manifest.
    pub plan: Arc<SchedulePlan>,
    /// Its read-only status.
    pub status: FireStatus,
    /// When it ticks next (epoch ms), if it is armed.
    pub next_ms: Option<i64>,
}

/// How often a host sharing the store reads every wakeup again (those other hosts asked for,
/// or took over).
const REARM_WAKEUPS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a claimed tick is remembered (ms): longer than any host sharing the store can lag
/// behind the others.
const TICK_CLAIM_KEPT_MS: i64 = 24 * 3600 * 1000;

/// What `GET /v1/schedules` lists: schedules, then self-scheduled wakeups.
pub struct Scheduled {
    /// The schedules, by id.
    pub schedules: Vec<ScheduleView>,
    /// The pending wakeups, oldest first.
    pub wakeups: Vec<WakeupRecord>,
}

impl Triggers {
    /// Arms every schedule and pending wakeup; what was missed while the host was down is
    /// armed to fire (once) as soon as [`run`](Self::run) runs. Call once
    /// at start, before it.
    pub async fn start(&self) -> Result<()> {
        self.register_triggers()?;
        self.arm_schedules(true)?;
        self.arm_wakeups().await
    }

    /// Fires schedules and wakeups as they come due, for ever (abort the task to stop it).
    /// Fires run concurrently: the schedule ticks started together as one batch, at most
    /// `MAX_TICKS_IN_FLIGHT` ticks in all, and each wakeup on its own, at most
    /// `MAX_WAKEUPS_IN_FLIGHT`; never one schedule twice at once, nor two wakeups of one
    /// task. The timer is read again while they run, so a slow fire holds back only its own
    /// schedule or task. Aborting cuts the fires in flight short: a tick recorded but not yet
    /// queued is lost, as in a crash, and never fired twice.
    pub async fn run(self) {
        let timer = self.firing.timer.clone();
        // Ticks by schedule id; wakeups by the task they wake.
        let mut ticks: Backlog<String, i64> = Backlog::default();
        let mut wakeups: Backlog<String, String> = Backlog::default();
        let mut in_flight = JoinSet::new();
        let mut fires: HashMap<tokio::task::Id, Fire> = HashMap::new();
        let (mut ticks_firing, mut wakeups_firing) = (0, 0);
        // On a store hosts share, wakeups another host asked for are armed here too.
        let shared = self.engine.store().shared();
        let mut rearm = tokio::time::interval(REARM_WAKEUPS_EVERY);
        loop {
            while wakeups_firing < MAX_WAKEUPS_IN_FLIGHT
                && let Some((task, id)) = wakeups.start()
            {
                wakeups_firing += 1;
                let engine = self.clone();
                let fire = in_flight.spawn(async move { engine.fire_wakeup(&id).await });
                fires.insert(fire.id(), Fire::Wakeup(task));
            }
            let mut batch = Vec::new();
            while ticks_firing + batch.len() < MAX_TICKS_IN_FLIGHT
                && let Some(tick) = ticks.start()
            {
                batch.push(tick);
            }
            if !batch.is_empty() {
                ticks_firing += batch.len();
                let ids = batch.iter().map(|(id, _)| id.clone()).collect();
                let engine = self.clone();
                let fire = in_flight.spawn(async move { engine.fire_schedules(batch).await });
                fires.insert(fire.id(), Fire::Ticks(ids));
            }
            tokio::select! {
                _ = rearm.tick(), if shared => {
                    if let Err(e) = self.arm_wakeups().await {
                        tracing::warn!("reading the wakeups of other hosts failed: {e}");
                    }
                }
                due = timer.next_due() => {
                    for d in due {
                        match d.id {
                            TimerId::Schedule(id) => ticks.push(id, d.at_ms),
                            TimerId::Wakeup(id) => wakeups.push(self.wakeup_task(&id), id),
                        }
                    }
                }
                Some(done) = in_flight.join_next_with_id() => {
                    let id = match done {
                        Ok((id, ())) => id,
                        Err(e) => {
                            tracing::error!("a schedule or wakeup fire failed: {e}");
                            e.id()
                        }
                    };
                    match fires.remove(&id) {
                        Some(Fire::Ticks(ids)) => {
                            ticks_firing -= ids.len();
                            for id in &ids {
                                ticks.finish(id);
                            }
                        }
                        Some(Fire::Wakeup(task)) => {
                            wakeups_firing -= 1;
                            wakeups.finish(&task);
                        }
                        None => {}
                    }
                }
            }
        }
    }

    /// The task wakeup `id` wakes (its own id if it cannot be read: it then fires as a
    /// no-op, alone).
    fn wakeup_task(&self, id: &str) -> String {
        match self.wakeup(id) {
            Ok(Some(w)) => w.task_id,
            _ => id.to_owned(),
        }
    }

    /// Brings the timer in step with the plan's schedules: arms the enabled ones, disarms the
    /// rest. `start`: the host just started, so a tick missed while it was down is armed at
    /// its (past) time, and the scheduler fires it first thing.
    pub(crate) fn arm_schedules(&self, start: bool) -> Result<()> {
        let plan = self.engine.plan();
        let now = now_ms();
        let mut keep = std::collections::HashSet::new();
        let mut ids: Vec<&String> = plan.schedules.keys().collect();
        ids.sort();
        for id in ids {
            let Some(s) = plan.schedules.get(id) else {
                continue;
            };
            let status = match self
                .engine
                .store()
                .state::<FireStatus>(SCHEDULE_STATE, id)?
            {
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
                        .latest_missed(status.last_fired_ms.unwrap_or(status.created_ms), now)
                })
                .flatten();
            if let Some(tick) = missed {
                tracing::info!(schedule.id = %id, "a tick missed while the host was down fires now");
                self.firing.timer.arm(TimerId::Schedule(id.clone()), tick);
            } else {
                self.arm_schedule(s, Some(&status), None, now);
            }
        }
        let mut armed = lock(&self.firing.armed);
        for gone in armed.difference(&keep) {
            self.firing.timer.disarm(&TimerId::Schedule(gone.clone()));
        }
        *armed = keep;
        Ok(())
    }

    /// Arms `s`'s next tick after `now`, or, when the tick `fired` was fired so late that
    /// the ones after it came due meanwhile, the latest of those (so a host behind by less
    /// than a period loses no tick, and one behind by many fires once for them all); with a
    /// `ttl`, no later than its expiry (the final fire) when its `status` could be read.
    /// Returns the deadline.
    fn arm_schedule(
        &self,
        s: &SchedulePlan,
        status: Option<&FireStatus>,
        fired: Option<i64>,
        now: i64,
    ) -> Option<i64> {
        let expiry = s
            .ttl
            .zip(status)
            .map(|(ttl, status)| expires_at(status.created_ms, ttl));
        let due = fired
            .and_then(|tick| s.timing.latest_missed(tick, now))
            .or_else(|| s.timing.next_after(now));
        let next = match (due, expiry) {
            (Some(next), Some(exp)) => Some(next.min(exp.max(now))),
            (next, _) => next,
        };
        let timer = &self.firing.timer;
        match next {
            Some(at) => timer.arm(TimerId::Schedule(s.id()), at),
            None => {
                timer.disarm(&TimerId::Schedule(s.id()));
            }
        }
        lock(&self.firing.armed).insert(s.id());
        next
    }

    /// Fires schedule ticks `(id, tick_ms)`, at most one per schedule, together: each queues
    /// its input for a new task id, whose runner makes the schedule's task for it (as its
    /// owner; see `Engine::adopt`), then its next tick is armed (or, past its `ttl`, it is
    /// done). Every tick is recorded as fired, durably, before its input is queued; the
    /// outcomes are recorded last. On a store of one host the inputs are queued in one
    /// transaction: three fsyncs in all, however many ticks. On a store hosts share, every
    /// host fires every tick, and each tick's input is queued with its claim in one write:
    /// the host whose claim comes first fires it, and one that dies right after its claim
    /// leaves the input to the host that takes its tasks over.
    pub(crate) async fn fire_schedules(&self, ticks: Vec<(String, i64)>) {
        let plan = self.engine.plan();
        let now = now_ms();
        let recorded = {
            let (plan, ticks) = (Arc::clone(&plan), ticks.clone());
            self.off_workers(move |engine| engine.record_ticks(&plan, &ticks, now))
                .await
        };
        let mut fired = match recorded {
            Ok(fired) => fired,
            Err(e) => {
                // Lost, as in a crash; the schedules go on from their next tick.
                tracing::warn!("recording schedule ticks failed, none fired: {e}");
                let rearmed = self
                    .off_workers(move |engine| {
                        for (id, tick_ms) in &ticks {
                            if let Some(s) = plan.schedules.get(id) {
                                let status = engine.fire_status(SCHEDULE_STATE, id).ok();
                                engine.arm_schedule(s, status.as_ref(), Some(*tick_ms), now_ms());
                            }
                        }
                        Ok(())
                    })
                    .await;
                if let Err(e) = rearmed {
                    tracing::error!("schedule ticks not armed again: {e}");
                }
                return;
            }
        };
        let mut outcomes: Vec<(String, Outcome)> = Vec::new();
        let mut inputs = Vec::new();
        for r in &mut fired {
            match std::mem::replace(&mut r.tick, Tick::Dropped) {
                Tick::Queue(input) => inputs.push((r.claim(), input)),
                Tick::Dropped => outcomes.push((r.schedule.id(), Outcome::Dropped)),
                Tick::Failed(why) => outcomes.push((r.schedule.id(), Outcome::Failed(why))),
            }
        }
        if self.engine.store().shared() {
            outcomes.extend(self.queue_claimed(inputs, now).await);
        } else {
            outcomes.extend(self.queue_together(inputs).await);
        }
        let recorded = self
            .off_workers(move |engine| {
                for (id, outcome) in outcomes {
                    let outcome = match &outcome {
                        Outcome::Fired(task) => Ok(task.as_str()),
                        Outcome::Dropped => Err(FireOutcome::Dropped),
                        Outcome::Failed(why) => Err(FireOutcome::Failed(why)),
                        Outcome::Elsewhere => continue,
                    };
                    if let Err(e) =
                        engine.change_status(SCHEDULE_STATE, &id, fire_recorded(outcome))
                    {
                        tracing::warn!(schedule.id = %id, "recording a fire failed: {e}");
                    }
                }
                Ok(engine.engine.store().flush()?)
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!("recording the outcomes of schedule ticks failed: {e}");
        }
        for r in &fired {
            if r.last {
                tracing::info!(schedule.id = %r.schedule.id(), "fired its final time: its ttl has passed");
                lock(&self.firing.armed).remove(&r.schedule.id());
            } else {
                self.arm_schedule(&r.schedule, Some(&r.status), Some(r.tick_ms), now_ms());
            }
        }
    }

    /// Queues the inputs of ticks (with their claims, unused on a store of one host) in one
    /// transaction; their outcomes by schedule id.
    async fn queue_together(&self, inputs: Vec<(String, Input)>) -> Vec<(String, Outcome)> {
        let tasks: Vec<(String, String)> = inputs
            .iter()
            .map(|(_, input)| (schedule_of(input), input.task.clone()))
            .collect();
        let inputs = inputs.into_iter().map(|(_, input)| input).collect();
        let outcome = match Arrival::new()
            .accept(&self.engine, inputs, Run::Background)
            .await
        {
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(
                    "queueing the inputs of {} schedule ticks failed: {e}",
                    tasks.len()
                );
                Some(e.to_string())
            }
        };
        tasks
            .into_iter()
            .map(|(id, task)| match &outcome {
                None => (id, Outcome::Fired(task)),
                Some(why) => (id, Outcome::Failed(why.clone())),
            })
            .collect()
    }

    /// Queues the input of each tick with its claim, each in one write (side by side): a tick
    /// another host claimed first is theirs, and gives back what its fire took of this
    /// host's bounds. Their outcomes by schedule id.
    async fn queue_claimed(
        &self,
        inputs: Vec<(String, Input)>,
        now: i64,
    ) -> Vec<(String, Outcome)> {
        let mut queueing = JoinSet::new();
        for (claim, input) in inputs {
            let engine = self.engine.clone();
            let until = now.saturating_add(TICK_CLAIM_KEPT_MS);
            queueing.spawn(async move {
                let (id, task) = (schedule_of(&input), input.task.clone());
                let arrival = Arrival::once_until(claim, until);
                let queued = arrival.accept(&engine, vec![input], Run::Background).await;
                (id, task, queued)
            });
        }
        let plan = self.engine.plan();
        let mut outcomes = Vec::new();
        while let Some(done) = queueing.join_next().await {
            let Ok((id, task, queued)) = done else {
                continue;
            };
            let outcome = match queued {
                Ok(Accepted::Queued { .. }) => Outcome::Fired(task),
                Ok(Accepted::Duplicate) => {
                    if let Some(s) = plan.schedules.get(&id) {
                        self.unbound_fire(&format!("schedule:{id}"), &s.owner, now);
                    }
                    Outcome::Elsewhere
                }
                Err(e) => {
                    tracing::warn!(schedule.id = %id, "queueing a tick's input failed: {e}");
                    Outcome::Failed(e.to_string())
                }
            };
            outcomes.push((id, outcome));
        }
        outcomes
    }

    /// Records `ticks` as fired, durably (one flush), those of schedules that may still fire,
    /// each with the input to queue for its new task unless a bound dropped it.
    fn record_ticks(
        &self,
        plan: &Plan,
        ticks: &[(String, i64)],
        now: i64,
    ) -> Result<Vec<Recorded>> {
        let mut fired = Vec::new();
        for (id, tick_ms) in ticks {
            let Some(s) = plan.schedules.get(id) else {
                continue;
            };
            let status = self.fire_status(SCHEDULE_STATE, id)?;
            if !s.enabled || status.expired || status.revoked {
                continue;
            }
            let last = s
                .ttl
                .is_some_and(|ttl| agentmesh_timing::ttl::expired(status.created_ms, ttl, now));
            let status = self.change_status(SCHEDULE_STATE, id, |st| {
                st.last_fired_ms = Some((*tick_ms).max(st.last_fired_ms.unwrap_or(i64::MIN)));
                st.expired |= last;
            })?;
            let tick = match self.tick_input(s, now) {
                Ok(Some(input)) => Tick::Queue(input),
                Ok(None) => Tick::Dropped,
                Err(e) => {
                    tracing::warn!(schedule.id = %id, "schedule fire failed: {e}");
                    Tick::Failed(e.to_string())
                }
            };
            fired.push(Recorded {
                schedule: Arc::clone(s),
                status,
                last,
                tick_ms: *tick_ms,
                tick,
            });
        }
        self.engine.flush()?;
        Ok(fired)
    }

    /// The input of one tick of `s`, for a new task id; `None` when a bound dropped it.
    fn tick_input(&self, s: &SchedulePlan, now: i64) -> Result<Option<Input>> {
        let agent = self.engine.agent(&s.agent)?;
        let io = normalize_input(&agent, Value::Object(s.inputs.clone()))?;
        if let Some(why) = self.bound_fire(
            &format!("schedule:{}", s.id()),
            s.max_per_hour,
            &s.owner,
            now,
        )? {
            tracing::info!(schedule.id = %s.id(), "{why}");
            return Ok(None);
        }
        Ok(Some(Input::new(
            self.engine.new_task_id()?,
            io,
            Origin::Schedule { id: s.id() },
        )))
    }

    /// The schedules (optionally only those `owner` owns), sorted by id, and pending wakeups
    /// (oldest first); `task` lists only that task's wakeups.
    pub fn schedules(&self, task: Option<&str>, owner: Option<&str>) -> Result<Scheduled> {
        let mut schedules = Vec::new();
        if task.is_none() {
            let plan = self.engine.plan();
            let mut plans: Vec<&Arc<SchedulePlan>> = plan
                .schedules
                .values()
                .filter(|s| owner.is_none_or(|o| s.owner == o))
                .collect();
            plans.sort_by_key(|s| s.id());
            for s in plans {
                schedules.push(ScheduleView {
                    status: self.fire_status(SCHEDULE_STATE, &s.id())?,
                    next_ms: self.firing.timer.deadline(&TimerId::Schedule(s.id())),
                    plan: Arc::clone(s),
                });
            }
        }
        Ok(Scheduled {
            schedules,
            wakeups: self.pending_wakeups(task, owner)?,
        })
    }

    /// The owner of schedule or wakeup `id` (for access checks).
    pub fn schedule_owner(&self, id: &str) -> Result<String> {
        if let Some(s) = self.engine.plan().schedules.get(id) {
            return Ok(s.owner.clone());
        }
        match self.wakeup(id)? {
            Some(w) => Ok(self.engine.task(&w.task_id).map_or(w.owner, |t| t.user.id)),
            None => Err(EngineError::NotFound(format!("schedule `{id}`"))),
        }
    }

    /// Revokes schedule or wakeup `id`: a wakeup is deleted; a schedule of the config dir
    /// stops ticking (its manifest stays; the revocation is kept in the store).
    pub fn revoke_schedule(&self, id: &str) -> Result<()> {
        if self.engine.plan().schedules.contains_key(id) {
            self.update_status(SCHEDULE_STATE, id, |s| s.revoked = true)?;
            self.firing.timer.disarm(&TimerId::Schedule(id.to_owned()));
            lock(&self.firing.armed).remove(id);
            return Ok(());
        }
        if self.delete_wakeup(id)? {
            Ok(())
        } else {
            Err(EngineError::NotFound(format!("schedule `{id}`")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(backlog: &mut Backlog<&'static str, u32>) -> Vec<(&'static str, u32)> {
        std::iter::from_fn(|| backlog.start()).collect()
    }

    #[test]
    fn backlog_starts_one_fire_per_lane_and_each_lanes_fires_in_due_order() {
        let mut backlog = Backlog::default();
        for (lane, tick) in [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3)] {
            backlog.push(lane, tick);
        }
        assert_eq!(started(&mut backlog), [("a", 1), ("b", 1), ("c", 1)]);
        backlog.finish(&"b");
        assert_eq!(started(&mut backlog), [], "`a` is still in flight");
        backlog.finish(&"a");
        assert_eq!(started(&mut backlog), [("a", 2)]);
        backlog.push("b", 2);
        backlog.finish(&"a");
        assert_eq!(started(&mut backlog), [("b", 2), ("a", 3)]);
    }

    #[test]
    fn backlog_forgets_a_lane_with_nothing_left() {
        let mut backlog = Backlog::default();
        backlog.push("a", 1);
        assert_eq!(started(&mut backlog), [("a", 1)]);
        backlog.finish(&"a");
        assert!(backlog.lanes.is_empty() && backlog.ready.is_empty());
        backlog.finish(&"a");
        backlog.push("a", 2);
        assert_eq!(
            started(&mut backlog),
            [("a", 2)],
            "a stray finish changes nothing"
        );
    }
}
