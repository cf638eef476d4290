//! The agentmesh task engine: everything the Agent, Task Context, Middleware, Bindings,
//! Parameters and Mount pages say about running a task.
//!
//! - [`plan`]: a validated config compiled once (expressions, templates, functions, steps);
//! - [`task`]: the task record in the store and the context object built from it;
//! - `turn`: one input at a time per task: guardrails, the LLM loop, limits, outputs;
//! - `records`: records between turns (a cache) and a turn's journal, written in one
//!   write wherever the turn reaches outside the process and when it ends;
//! - `call`: one function call: bindings → `before_first` → `before` → runtime → `after`,
//!   statistics and allow lists;
//! - `steps`: assert / invoke / transform steps and `review()`;
//! - `condense`: condensation of the LLM's view when it passes the host's budget;
//! - `runtime`: the `cel` and `stateless_http` backends and sub-agent delegation;
//! - [`mount`]: the `file` mount backend;
//! - [`triggers`]: trigger sources, cold-start triggers (webhook and API), their bounds and
//!   status; `schedules`: schedules and the one scheduler; `wakeups`: the self-scheduling host
//!   tools `request_wakeup` / `cancel_wakeup`.
//!
//! An [`Engine`] owns a [`Plan`] and a [`Store`]. Inputs are queued durably
//! ([`Engine::submit`]) and processed in `queued_at` order, never two turns of one task at
//! once ([`Engine::run_until_idle`]). Operational errors go back to the LLM as call results;
//! only limits, `lock_task` and unrecoverable errors terminate a task.

mod call;
mod condense;
mod deliver;
pub mod mount;
pub mod plan;
mod providers;
mod records;
mod routes;
mod runtime;
mod schedules;
mod steps;
pub mod subscription;
pub mod task;
pub mod triggers;
mod turn;
mod wakeups;
mod wasm;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use agentmesh_expr::Activation;
use agentmesh_store::event::{ContentPart, Event, EventKind, EventSource, TriggerEnvelope};
use agentmesh_store::{Store, StoreError, now_ms, now_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

pub use deliver::{DEFAULT_DEDUPE_WINDOW, WebhookError, WebhookOutcome};
pub use plan::Plan;
pub use task::{Reason, Status, TaskRecord, UserRef};
pub use triggers::{FireError, SourceDelivery};
pub use wakeups::HostTool;

use plan::{AgentPlan, Target};
use providers::Providers;

/// How long a `review()` of a triggered turn (input with a trigger envelope: no human typed
/// it, so none may be watching) waits when [`EngineOptions::review_timeout`] is `None`; a
/// review nobody answers by then is a denial. Long enough for someone alerted to answer,
/// short enough that an unattended trigger does not hold its task for ever.
pub const TRIGGERED_REVIEW_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The deepest chain of delegations (a task delegating to an agent that delegates …).
pub const MAX_DELEGATION_DEPTH: u32 = 4;

/// Errors of the engine's API (a task's own failures are recorded in the task, not returned).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The configuration cannot run.
    #[error("configuration: {0}")]
    Config(String),
    /// The caller's input is invalid.
    #[error("invalid input: {0}")]
    Input(String),
    /// No such task, agent or review.
    #[error("not found: {0}")]
    NotFound(String),
    /// The task cannot take this request in its state.
    #[error("conflict: {0}")]
    Conflict(String),
}

/// The engine's result.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// How the engine behaves where a host has a choice.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Where mounts live when the host config names no `mount.root`.
    pub mount_root: PathBuf,
    /// How long `review()` waits for a decision; `None` waits for ever, except in triggered
    /// turns ([`TRIGGERED_REVIEW_TIMEOUT`]). A review nobody answers in time is a denial.
    pub review_timeout: Option<Duration>,
    /// `runtime.*` values for expressions.
    pub runtime: Value,
    /// Where compiled components are cached (`DATA_DIR/components`); `None` compiles on every
    /// load.
    pub component_cache: Option<PathBuf>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            mount_root: PathBuf::from(".agentmesh/mounts"),
            review_timeout: None,
            runtime: json!({"version": env!("CARGO_PKG_VERSION"), "dashboard_url": "", "api_root": ""}),
            component_cache: None,
        }
    }
}

/// An input waiting in a task's queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueuedInput {
    /// The TaskIO: `message` (content parts) and parameter values.
    pub io: Value,
    /// Epoch ms.
    pub queued_at: i64,
    /// Set when no human typed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerEnvelope>,
}

/// A request to start a task.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// `namespace/name`.
    pub agent: String,
    /// `{"message": …, …params}`; `None` creates the task without input.
    pub input: Option<Value>,
    /// Who the task runs for.
    pub user: UserRef,
}

/// The task engine. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    plan: RwLock<Arc<Plan>>,
    store: Arc<Store>,
    providers: Providers,
    options: EngineOptions,
    /// One lock per task: a turn holds it, so turns of one task never overlap.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Tasks whose running turn must stop at its next step.
    interrupts: Mutex<HashSet<String>>,
    /// Tasks with a runner (see [`Engine::kick`]); `true`: more input arrived while it ran.
    runners: Mutex<HashMap<String, bool>>,
    /// Active subscriptions, indexed for routing.
    routes: RwLock<routes::Routes>,
    /// Reviews waiting for a decision, by review id.
    reviews: Mutex<HashMap<String, oneshot::Sender<(bool, String)>>>,
    http: reqwest::Client,
    /// The Wasm plugin host, started on first use (`Err`: why it could not start).
    plugins: OnceLock<std::result::Result<Arc<wasm::Plugins>, String>>,
    /// Triggers, schedules and wakeups: the timer, throttles, quota.
    triggers: triggers::Runtime,
    /// Tasks whose running turn was not typed by a human (its input has a trigger envelope).
    triggered: Mutex<HashSet<String>>,
    /// Records of tasks between turns.
    records: records::RecordCache,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Engine {
    /// An engine over `plan` and `store`.
    pub fn new(plan: Plan, store: Arc<Store>, options: EngineOptions) -> Engine {
        Engine {
            inner: Arc::new(Inner {
                plan: RwLock::new(Arc::new(plan)),
                store,
                providers: Providers::default(),
                options,
                locks: Mutex::new(HashMap::new()),
                interrupts: Mutex::new(HashSet::new()),
                runners: Mutex::new(HashMap::new()),
                routes: RwLock::new(routes::Routes::default()),
                reviews: Mutex::new(HashMap::new()),
                http: reqwest::Client::new(),
                plugins: OnceLock::new(),
                triggers: triggers::Runtime::default(),
                triggered: Mutex::new(HashSet::new()),
                records: records::RecordCache::default(),
            }),
        }
    }

    /// The plugin host, started on first use.
    fn plugins(&self) -> std::result::Result<Arc<wasm::Plugins>, String> {
        self.inner
            .plugins
            .get_or_init(|| {
                wasm::Plugins::new(
                    Arc::clone(&self.inner.store),
                    self.inner.options.component_cache.clone(),
                )
                .map(Arc::new)
                .map_err(|e| format!("the Wasm plugin host could not start: {e}"))
            })
            .clone()
    }

    /// Tears down every open tool session (Teardown); call before the process exits.
    pub async fn shutdown(&self) {
        if let Some(Ok(p)) = self.inner.plugins.get() {
            p.close_all().await;
        }
    }

    /// The plan in force.
    pub fn plan(&self) -> Arc<Plan> {
        Arc::clone(
            &self
                .inner
                .plan
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Loads every component of `plan` aside and, when all load, makes `plan` and its
    /// components the versions in force (atomically for new work; calls in flight finish on
    /// the old versions). On error nothing changes and the error says which component failed.
    pub async fn reload(&self, plan: Plan) -> std::result::Result<(), String> {
        self.install_components(&plan).await?;
        *self
            .inner
            .plan
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(plan);
        self.rebuild_routes().map_err(|e| e.to_string())?;
        self.register_triggers().map_err(|e| e.to_string())?;
        self.arm_schedules(false).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Loads every component of the plan in force (compiling it, or reading the compiled
    /// cache), so the first call does not pay for it and a broken one shows at start.
    pub async fn load_components(&self) -> std::result::Result<(), String> {
        let plan = self.plan();
        self.install_components(&plan).await
    }

    async fn install_components(&self, plan: &Plan) -> std::result::Result<(), String> {
        let paths = plan.components();
        if paths.is_empty() {
            return Ok(());
        }
        let plugins = self.plugins()?;
        let loader = Arc::clone(&plugins);
        let loaded = tokio::task::spawn_blocking(move || loader.preload(&paths))
            .await
            .map_err(|e| format!("loading components: {e}"))??;
        plugins.install(loaded);
        Ok(())
    }

    /// The components in force: name, path and content hash.
    pub fn component_versions(&self) -> Vec<(String, PathBuf, String)> {
        match self.inner.plugins.get() {
            Some(Ok(p)) => p.versions(),
            _ => Vec::new(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    fn agent(&self, id: &str) -> Result<Arc<AgentPlan>> {
        self.plan()
            .agents
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::NotFound(format!("agent `{id}`")))
    }

    /// Task `id`'s record.
    pub fn task(&self, id: &str) -> Result<TaskRecord> {
        self.peek(id, TaskRecord::clone)
    }

    /// Task `id`'s events after `after`.
    pub fn events(&self, id: &str, after: u64) -> Result<Vec<Event>> {
        Ok(self.inner.store.events(id, after)?)
    }

    /// The task object (CONTRACT §3).
    pub fn task_object(&self, id: &str) -> Result<Value> {
        self.peek(id, |record| record.object(self.inner.store.queue_depth(id)))
    }

    /// Creates a task and queues its first input (when given). Bound parameters' allow lists
    /// are sealed now, to the bindings' values.
    pub async fn create_task(&self, new: NewTask) -> Result<TaskRecord> {
        self.create(new, None, 0).await
    }

    async fn create(&self, new: NewTask, parent: Option<&str>, depth: u32) -> Result<TaskRecord> {
        let agent = self.agent(&new.agent)?;
        let io = match &new.input {
            Some(input) => Some(normalize_input(&agent, input)?),
            None => None,
        };
        let id = format!("t_{:x}{:06x}", now_ms(), self.inner.store.generate_id()?);
        let mut record = TaskRecord {
            id: id.clone(),
            agent: agent.id(),
            user: new.user,
            status: Some(Status::Idle),
            created_at: now_rfc3339(),
            created_ms: now_ms(),
            parent: parent.map(str::to_owned),
            depth,
            last_activity_ms: now_ms(),
            subscriptions: subscription::for_agent(&agent),
            journal: records::Journal::new_task(),
            ..TaskRecord::default()
        };
        self.seal_allow_lists(&agent, &mut record);
        let mut events = vec![(
            EventSource::Environment,
            EventKind::ConversationStateUpdateEvent {
                key: "status".into(),
                value: json!("idle"),
            },
        )];
        if !record.subscriptions.is_empty() {
            let added: Vec<Value> = record
                .subscriptions
                .iter()
                .map(|s| json!({"tool": s.tool, "event": s.event}))
                .collect();
            events.push((
                EventSource::Environment,
                EventKind::ConversationStateUpdateEvent {
                    key: "subscriptions_added".into(),
                    value: Value::Array(added),
                },
            ));
        }
        self.save(&mut record, events)?;
        self.sync_routes(&record);
        // Its first turn starts from memory.
        let record = self.checkin(record);
        if let Some(io) = io {
            self.enqueue(&id, io, None)?;
        }
        Ok(TaskRecord::clone(&record))
    }

    /// Evaluates every binding at task start and seals its allow-list entry to the value.
    fn seal_allow_lists(&self, agent: &AgentPlan, record: &mut TaskRecord) {
        let context = record.context(agent);
        let mut act = Activation::new();
        act.set_aliased("context", "c", context)
            .set("runtime", self.inner.options.runtime.clone())
            .set("now", json!(now_rfc3339()));
        for cap in &agent.capabilities {
            let Target::Tool(tool) = &cap.target else {
                continue;
            };
            for (name, expr) in &cap.bindings {
                let list = record
                    .allow_lists
                    .entry(tool.id())
                    .or_default()
                    .entry(name.clone())
                    .or_default();
                if let Ok(v) = expr.evaluate(&act) {
                    list.insert(call::allow_value(&v));
                }
                record
                    .sealed
                    .entry(tool.id())
                    .or_default()
                    .insert(name.clone());
            }
        }
    }

    /// Queues input for task `id`, durably (flushed) before returning; returns `queued_at`.
    pub fn submit(&self, id: &str, input: &Value, trigger: Option<TriggerEnvelope>) -> Result<i64> {
        let (status, agent) = self.peek(id, |r| (r.status(), r.agent.clone()))?;
        if status == Status::Terminated {
            return Err(EngineError::Conflict(format!("task `{id}` is terminated")));
        }
        let agent = self.agent(&agent)?;
        let io = normalize_input(&agent, input)?;
        self.enqueue(id, io, trigger)
    }

    fn enqueue(&self, id: &str, io: Value, trigger: Option<TriggerEnvelope>) -> Result<i64> {
        let queued_at = now_ms();
        let input = QueuedInput {
            io,
            queued_at,
            trigger,
        };
        self.inner.store.enqueue(id, queued_at, &input)?;
        Ok(queued_at)
    }

    /// Processes task `id`'s queued inputs, in order, until none is left or the task
    /// terminates; returns the record. Concurrent callers for one task take turns.
    pub async fn run_until_idle(&self, id: &str) -> Result<Arc<TaskRecord>> {
        let task_lock = self.task_lock(id);
        let _turn = task_lock.lock().await;
        let mut record = self.checkout(id)?;
        loop {
            if self.interrupt_requested(id) {
                return Ok(self.checkin(record));
            }
            let Some((key, input)) = self.inner.store.next_queued::<QueuedInput>(id)? else {
                return Ok(self.checkin(record));
            };
            record.journal.take(key);
            if record.status() == Status::Terminated {
                self.save(&mut record, Vec::new())?;
                continue;
            }
            let agent = self.agent(&record.agent)?;
            let triggered = input.trigger.is_some();
            if triggered {
                lock(&self.inner.triggered).insert(id.to_owned());
            }
            let ran = turn::run(self, &agent, &mut record, input).await;
            if triggered {
                lock(&self.inner.triggered).remove(id);
            }
            self.sync_routes(&record);
            ran?;
            // A turn that stopped early (an interrupt) keeps what it did.
            self.write_ahead(&mut record)?;
            if record.status() == Status::Terminated
                && let Some(Ok(p)) = self.inner.plugins.get()
            {
                p.close_task(&record.id).await;
            }
        }
    }

    /// Runs task `id`'s queued input in the background (on the current tokio runtime), unless
    /// a runner for it is already going; that runner then picks the new input up.
    pub fn kick(&self, id: &str) {
        {
            let mut runners = lock(&self.inner.runners);
            if let Some(more) = runners.get_mut(id) {
                *more = true;
                return;
            }
            runners.insert(id.to_owned(), false);
        }
        let engine = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            loop {
                if let Err(e) = engine.run_until_idle(&id).await {
                    tracing::error!(task.id = %id, "task runner failed: {e}");
                }
                let mut runners = lock(&engine.inner.runners);
                match runners.get_mut(&id) {
                    Some(more) if *more => *more = false,
                    _ => {
                        runners.remove(&id);
                        return;
                    }
                }
            }
        });
    }

    /// Whether a turn of task `id` is running or about to run.
    pub fn is_busy(&self, id: &str) -> bool {
        lock(&self.inner.runners).contains_key(id)
    }

    /// Interrupts task `id`: its running turn stops at the next step, and its subscriptions
    /// are suspended until it takes new input. Returns once the interrupt is recorded.
    pub async fn interrupt(&self, id: &str) -> Result<()> {
        if self.peek(id, TaskRecord::status)? == Status::Terminated {
            return Err(EngineError::Conflict(format!("task `{id}` is terminated")));
        }
        lock(&self.inner.interrupts).insert(id.to_owned());
        let task_lock = self.task_lock(id);
        let _turn = task_lock.lock().await;
        lock(&self.inner.interrupts).remove(id);
        let mut record = self.checkout(id)?;
        if record.status() == Status::Terminated {
            return Ok(());
        }
        record.interrupted = true;
        if record.status() != Status::Idle {
            record.status = Some(Status::Idle);
        }
        let events = vec![
            (EventSource::User, EventKind::PauseEvent {}),
            (
                EventSource::Environment,
                EventKind::ConversationStateUpdateEvent {
                    key: "subscriptions_removed".into(),
                    value: json!({"reason": "interrupt"}),
                },
            ),
        ];
        self.save(&mut record, events)?;
        self.sync_routes(&record);
        drop(_turn);
        if self.inner.store.queue_depth(id) > 0 {
            self.kick(id);
        }
        Ok(())
    }

    /// Whether task `id` was asked to stop its running turn.
    pub(crate) fn interrupt_requested(&self, id: &str) -> bool {
        lock(&self.inner.interrupts).contains(id)
    }

    /// Deletes task `id`: it terminates with reason `deleted`, its queue is cleared and its
    /// subscriptions removed. Its record and log stay readable.
    pub async fn delete_task(&self, id: &str) -> Result<()> {
        self.task(id)?;
        lock(&self.inner.interrupts).insert(id.to_owned());
        let task_lock = self.task_lock(id);
        let _turn = task_lock.lock().await;
        lock(&self.inner.interrupts).remove(id);
        let mut record = self.checkout(id)?;
        self.inner.store.clear_queue(id)?;
        if record.status() != Status::Terminated {
            record.status = Some(Status::Terminated);
            record.reason = Some(Reason::Deleted);
        }
        record.subscriptions.clear();
        let events = vec![
            (
                EventSource::Environment,
                EventKind::ConversationStateUpdateEvent {
                    key: "subscriptions_removed".into(),
                    value: json!({"reason": "deleted"}),
                },
            ),
            steps::status_event("terminated"),
        ];
        self.save(&mut record, events)?;
        self.sync_routes(&record);
        self.delete_task_wakeups(id)?;
        if let Some(Ok(p)) = self.inner.plugins.get() {
            p.close_task(id).await;
        }
        Ok(())
    }

    /// How long a `review()` in task `id`'s running turn waits: the configured timeout, or
    /// in a triggered turn at most [`TRIGGERED_REVIEW_TIMEOUT`].
    pub(crate) fn review_timeout(&self, id: &str) -> Option<Duration> {
        let triggered = lock(&self.inner.triggered).contains(id);
        match self.inner.options.review_timeout {
            Some(t) => Some(t),
            None if triggered => Some(TRIGGERED_REVIEW_TIMEOUT),
            None => None,
        }
    }

    /// Every task, optionally only those of `agent`, in `status`, or owned by `owner`.
    pub fn list_tasks(
        &self,
        agent: Option<&str>,
        status: Option<Status>,
        owner: Option<&str>,
    ) -> Result<Vec<TaskRecord>> {
        Ok(self
            .stored_records()?
            .into_iter()
            .filter(|t| agent.is_none_or(|a| t.agent == a))
            .filter(|t| status.is_none_or(|s| t.status() == s))
            .filter(|t| owner.is_none_or(|o| t.user.id == o))
            .collect())
    }

    /// Brings tasks back after a restart: a task that was mid-turn is set idle, every call
    /// it made without a result is reported to the LLM as interrupted (never silently re-run),
    /// and every task with queued input is started. Call once, on a runtime, at start.
    pub fn recover(&self) -> Result<usize> {
        let mut resumed = 0;
        for mut record in self.stored_records()? {
            if !matches!(record.status(), Status::Running | Status::Waiting) {
                continue;
            }
            let mut events = unanswered_calls(&self.events(&record.id, 0)?);
            record.status = Some(Status::Idle);
            record.pending_review = None;
            events.push((
                EventSource::Environment,
                EventKind::ConversationStateUpdateEvent {
                    key: "restart".into(),
                    value: json!({"message": "the host restarted during a turn"}),
                },
            ));
            events.push(steps::status_event("idle"));
            self.save(&mut record, events)?;
        }
        self.rebuild_routes()?;
        for id in self.inner.store.tasks_with_queued_input()? {
            self.kick(&id);
            resumed += 1;
        }
        Ok(resumed)
    }

    /// The routing state, for reading.
    pub(crate) fn routes(&self) -> std::sync::RwLockReadGuard<'_, routes::Routes> {
        self.inner
            .routes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Brings the routing index in step with `record` (its subscriptions, allow lists and
    /// deadlines).
    pub(crate) fn sync_routes(&self, record: &TaskRecord) {
        let plan = self.plan();
        self.inner
            .routes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .sync(&plan, record);
    }

    /// Rebuilds the routing index from every task record (at start and after a reload).
    pub fn rebuild_routes(&self) -> Result<usize> {
        let plan = self.plan();
        let records = self.stored_records()?;
        let routes = routes::Routes::build(&plan, &records);
        let n = routes.len();
        *self
            .inner
            .routes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = routes;
        Ok(n)
    }

    /// Removes the subscriptions that have expired by now (the tasks are otherwise
    /// untouched), with an event in each task's log. Tasks in a turn are left for later.
    /// Returns how many tasks lost subscriptions.
    pub async fn expire_subscriptions(&self) -> Result<usize> {
        let now = now_ms();
        let mut n = 0;
        let expired = self.routes().expired(now);
        for id in expired {
            let task_lock = self.task_lock(&id);
            let Ok(_turn) = task_lock.try_lock() else {
                continue;
            };
            let mut record = self.checkout(&id)?;
            if let Some(event) = subscription::prune_expired(&mut record, now) {
                self.save(&mut record, vec![event])?;
                n += 1;
            }
            self.sync_routes(&record);
            self.checkin(record);
        }
        Ok(n)
    }

    fn task_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.inner.locks);
        Arc::clone(locks.entry(id.to_owned()).or_default())
    }

    /// Answers a review: resumes a task waiting in `review()`.
    pub fn decide_review(
        &self,
        task_id: &str,
        review_id: &str,
        approve: bool,
        user: &str,
    ) -> Result<()> {
        let pending = self.peek(task_id, |r| {
            r.pending_review
                .as_ref()
                .is_some_and(|r| r.review_id == review_id)
        })?;
        if !pending {
            return Err(EngineError::NotFound(format!(
                "review `{review_id}` of task `{task_id}`"
            )));
        }
        let sender = lock(&self.inner.reviews).remove(review_id);
        match sender {
            Some(s) => s.send((approve, user.to_owned())).map_err(|_| {
                EngineError::Conflict(format!("review `{review_id}` is no longer waited for"))
            }),
            None => Err(EngineError::NotFound(format!("review `{review_id}`"))),
        }
    }
}

/// An error result for every call in `log` that has none (the host stopped mid-call).
fn unanswered_calls(log: &[Event]) -> Vec<(EventSource, EventKind)> {
    let mut open: Vec<(String, String)> = Vec::new();
    for event in log {
        match &event.kind {
            EventKind::ActionEvent { tool_call, .. } => {
                open.push((tool_call.id.clone(), tool_call.name.clone()));
            }
            EventKind::ObservationEvent { tool_call_id, .. }
            | EventKind::UserRejectObservation { tool_call_id, .. } => {
                open.retain(|(id, _)| id != tool_call_id);
            }
            EventKind::AgentErrorEvent {
                tool_call_id: Some(id),
                ..
            } => open.retain(|(open_id, _)| open_id != id),
            _ => {}
        }
    }
    open.into_iter()
        .map(|(id, name)| {
            (
                EventSource::Environment,
                EventKind::AgentErrorEvent {
                    tool_call_id: Some(id),
                    tool_name: Some(name),
                    error: "interrupted: the host restarted during this call; it was not re-run"
                        .into(),
                },
            )
        })
        .collect()
}

/// Checks input against the agent's parameters: `message` required unless defaulted (a bare
/// string becomes one text part), unknown keys refused, defaults filled, required present.
pub fn normalize_input(agent: &AgentPlan, input: &Value) -> Result<Value> {
    let mut io = match input {
        Value::Object(m) => m.clone(),
        Value::String(s) => {
            let mut m = Map::new();
            m.insert("message".into(), Value::String(s.clone()));
            m
        }
        _ => {
            return Err(EngineError::Input(
                "input must be an object with `message`".into(),
            ));
        }
    };
    let props = agent.parameters.as_ref().map(|p| &p.properties);
    for key in io.keys() {
        if key != "message" && !props.is_some_and(|p| p.contains_key(key)) {
            return Err(EngineError::Input(format!(
                "`{key}` is not a parameter of agent `{}`",
                agent.id()
            )));
        }
    }
    for (name, prop) in props.into_iter().flatten() {
        if !io.contains_key(name) {
            match &prop.default {
                Some(d) => {
                    io.insert(name.clone(), d.clone());
                }
                None if name == "message" => {}
                None => {
                    return Err(EngineError::Input(format!(
                        "missing required parameter `{name}`"
                    )));
                }
            }
        }
    }
    let message = io.remove("message").ok_or_else(|| {
        EngineError::Input("missing `message` (and the agent declares no default)".into())
    })?;
    io.insert("message".into(), message_parts(&message)?);
    Ok(Value::Object(io))
}

/// A message as content parts: a string becomes one text part.
fn message_parts(message: &Value) -> Result<Value> {
    match message {
        Value::String(s) => Ok(json!([ContentPart::text(s.clone())])),
        Value::Array(parts) => {
            for p in parts {
                if serde_json::from_value::<ContentPart>(p.clone()).is_err() {
                    return Err(EngineError::Input(
                        "`message` parts must be `{\"mimeType\": …, \"text\": …}`".into(),
                    ));
                }
            }
            Ok(message.clone())
        }
        _ => Err(EngineError::Input(
            "`message` must be a string or a list of content parts".into(),
        )),
    }
}
