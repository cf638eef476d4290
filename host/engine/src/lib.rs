//! The agentmesh task engine: everything the Agent, Task Context, Middleware, Bindings,
//! Parameters and Mount pages say about running a task.
//!
//! - [`plan`]: a validated config compiled once (expressions, templates, functions, steps);
//! - [`task`]: the task record in the store and the context object built from it;
//! - `turn`: one input at a time per task: guardrails, the LLM loop, limits, outputs;
//! - `call`: one function call: bindings → `before_first` → `before` → runtime → `after`,
//!   statistics and allow lists;
//! - `steps`: assert / invoke / transform steps and `review()`;
//! - `runtime`: the `cel` and `stateless_http` backends and sub-agent delegation;
//! - [`mount`]: the `file` mount backend.
//!
//! An [`Engine`] owns a [`Plan`] and a [`Store`]. Inputs are queued durably
//! ([`Engine::submit`]) and processed in `queued_at` order, never two turns of one task at
//! once ([`Engine::run_until_idle`]). Operational errors go back to the LLM as call results;
//! only limits, `lock_task` and unrecoverable errors terminate a task.

mod call;
pub mod mount;
pub mod plan;
mod providers;
mod runtime;
mod steps;
pub mod task;
mod turn;
mod wasm;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use agentmesh_expr::Activation;
use agentmesh_store::event::{ContentPart, Event, EventKind, EventSource, TriggerEnvelope};
use agentmesh_store::{Store, StoreError, now_ms, now_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

pub use plan::Plan;
pub use task::{Reason, Status, TaskRecord, UserRef};

use plan::{AgentPlan, Target};
use providers::Providers;

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
    /// How long `review()` waits for a decision; `None` waits for ever. A review nobody
    /// answers in time is a denial.
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
    /// Reviews waiting for a decision, by review id.
    reviews: Mutex<HashMap<String, oneshot::Sender<(bool, String)>>>,
    http: reqwest::Client,
    /// The Wasm plugin host, started on first use (`Err`: why it could not start).
    plugins: OnceLock<std::result::Result<Arc<wasm::Plugins>, String>>,
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
                reviews: Mutex::new(HashMap::new()),
                http: reqwest::Client::new(),
                plugins: OnceLock::new(),
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
        self.inner
            .store
            .task(id)?
            .ok_or_else(|| EngineError::NotFound(format!("task `{id}`")))
    }

    /// Task `id`'s events after `after`.
    pub fn events(&self, id: &str, after: u64) -> Result<Vec<Event>> {
        Ok(self.inner.store.events(id, after)?)
    }

    /// The task object (CONTRACT §3).
    pub fn task_object(&self, id: &str) -> Result<Value> {
        let record = self.task(id)?;
        Ok(record.object(self.inner.store.queue_depth(id)))
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
            ..TaskRecord::default()
        };
        self.seal_allow_lists(&agent, &mut record);
        let created = (
            EventSource::Environment,
            EventKind::ConversationStateUpdateEvent {
                key: "status".into(),
                value: json!("idle"),
            },
        );
        self.inner.store.commit(&id, &record, vec![created])?;
        if let Some(io) = io {
            self.enqueue(&id, io, None)?;
        }
        Ok(record)
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
        let record = self.task(id)?;
        if record.status() == Status::Terminated {
            return Err(EngineError::Conflict(format!("task `{id}` is terminated")));
        }
        let agent = self.agent(&record.agent)?;
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
    pub async fn run_until_idle(&self, id: &str) -> Result<TaskRecord> {
        let task_lock = {
            let mut locks = lock(&self.inner.locks);
            Arc::clone(locks.entry(id.to_owned()).or_default())
        };
        let _turn = task_lock.lock().await;
        loop {
            let mut record = self.task(id)?;
            let Some((key, input)) = self.inner.store.next_queued::<QueuedInput>(id)? else {
                return Ok(record);
            };
            if record.status() == Status::Terminated {
                self.inner
                    .store
                    .take_queued(id, &key, &record, Vec::new())?;
                continue;
            }
            let agent = self.agent(&record.agent)?;
            turn::run(self, &agent, &mut record, key, input).await?;
            if record.status() == Status::Terminated
                && let Some(Ok(p)) = self.inner.plugins.get()
            {
                p.close_task(&record.id).await;
            }
        }
    }

    /// Answers a review: resumes a task waiting in `review()`.
    pub fn decide_review(
        &self,
        task_id: &str,
        review_id: &str,
        approve: bool,
        user: &str,
    ) -> Result<()> {
        let record = self.task(task_id)?;
        if record
            .pending_review
            .as_ref()
            .is_none_or(|r| r.review_id != review_id)
        {
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
