//! The agentmesh task engine: everything the Agent, Task Context, Middleware, Bindings,
//! Parameters and Mount pages say about running a task.
//!
//! - [`plan`]: a validated config compiled once (expressions, templates, functions, steps);
//! - [`task`]: the task record in the store and the context object built from it;
//! - `turn`: one input at a time per task: guardrails, the LLM loop, limits, outputs; and
//!   the rest of a turn whose `review()` was pending across a restart;
//! - `records`: records between turns (a cache) and a turn's journal, written in one
//!   write wherever the turn reaches outside the process and when it ends; `journal`: what a
//!   record carries for it (the journal, what the store holds); `known`: each task's queue
//!   as far as this host knows it without asking the store;
//! - `call`: one function call: bindings → `before_first` → `before` → runtime → `after`,
//!   statistics and allow lists;
//! - `steps`: assert / invoke / transform steps and their failure policy; `review`: a
//!   person's decision in an expression (`review()`), the wait for it and its replay;
//! - `condense`: condensation of the LLM's view when it passes the host's budget;
//! - `runtime`: the `cel` and `stateless_http` backends, the dispatch to the others, and
//!   sub-agent delegation; `outcome`: how an action ended, whichever backend ran it;
//! - `session`: the `stateful_session` backend, each task's remote sessions, pooled; `auth`: the
//!   header values of auth providers (`{auth.<provider>()}`), OAuth tokens cached;
//! - `secrets`: the plan's secrets, collected when it is built, and the scrubbing of every
//!   event by them as it is logged (the published set is [`EngineOptions::secrets`]);
//! - [`mount`]: the `file` mount backend;
//! - `providers`: the LLM providers of the plan, made on first use;
//! - `wasm`: the Wasm plugin host of the plan's components and each task's tool sessions;
//! - `mcp`: each task's sessions with the MCP servers of `mcp` tools, pooled; and
//!   [`probe`], `validate --probe`'s check of actions against their servers' tools;
//! - `pool`: the pool both kinds of sessions are kept in, bounded in number (least recently
//!   used idle session closed to make room);
//! - `kubernetes`: the `kubernetes_job` backend, a Job per call through the Kubernetes API;
//! - `poll`: one poll of a `receive.poll` event's endpoint ([`PollKey`]: for one set of
//!   parameter values), its new items, and what each key keeps between polls;
//! - [`sources`]: what the pollers and the sessions receiving MCP resource updates are doing
//!   (their last success, their last error), for `/v1/status`;
//! - [`subscription`]: a task's subscriptions to tool events and their expiry;
//! - `door`: the one door every arrival enters by: dedupe (a delivery's id held while the
//!   caller's admission runs: [`Engine::arrive`], [`Admitted`], [`Through`]), the trigger
//!   envelope, one durable write of its queue entries, waking the runners ([`Origin`],
//!   [`Run`], [`Arrival`]);
//! - `admission`: whether a task takes a tool event routed to it (its filter component and
//!   middleware), for `agentmesh-routing`;
//! - `hosts`: several hosts on one store — which tasks this host runs (their leases), what
//!   the others tell it, taking over the tasks of a host that went quiet
//!   ([`Engine::serve_hosts`]);
//! - `threads`: where blocking work runs — task runners on the turn pool ([`turn_runtime`]),
//!   store calls elsewhere and long work off the async workers;
//! - [`watch`]: what other crates keep in step with the engine ([`Watcher`]: the routing
//!   index, the scheduler) and the host tools another crate runs ([`HostTools`]: the wakeup
//!   tools of `agentmesh-triggers`).
//!
//! An [`Engine`] owns a [`Plan`] and a store (any `agentmesh_store::Backend`). Inputs are queued durably through the door
//! ([`Engine::submit`]) and processed in `queued_at` order, never two turns of one task at
//! once ([`Engine::run_until_idle`]). Operational errors go back to the LLM as call results;
//! only limits, `lock_task` and unrecoverable errors terminate a task.

mod admission;
mod auth;
mod call;
mod condense;
mod direct;
mod door;
mod hosts;
mod inspect;
mod journal;
mod known;
mod kubernetes;
mod mcp;
mod mcp_events;
mod mcp_sse;
pub mod mount;
mod outcome;
pub mod plan;
mod poll;
mod pool;
mod providers;
mod records;
mod review;
mod runtime;
mod secrets;
mod session;
pub mod sources;
mod steps;
pub mod subscription;
pub mod task;
mod threads;
mod turn;
mod wasm;
pub mod watch;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

use agentmesh_expr::{Activation, Bound, Needs};
use agentmesh_model::event::{ContentPart, Event, EventKind, EventSource, TriggerEnvelope};
use agentmesh_secrets::SharedSecrets;
use agentmesh_store::{Backend, Offloaded, QueueKey, StoreError, Typed, now_ms, now_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use admission::Admission;
pub use agentmesh_plugins::{ComponentMetrics, LATENCY_BUCKETS, PoolMetrics};
pub use direct::DirectEnd;
pub use door::{
    Accepted, Admitted, Arrival, DEFAULT_DEDUPE_WINDOW, Delivered, Entrance, Input, Origin, Run,
    Through, WebhookError,
};
pub use hosts::MissedHook;
pub use inspect::{CacheStats, LoadedDetail};
pub use mcp::{About, Finding, McpSessionState, McpSessionView, Probe, probe};
pub use mcp_events::ResourceUpdate;
pub use plan::HostTool;
pub use plan::Plan;
pub use poll::{PollError, PollKey, Polled, PolledItem};
pub use records::stored_tasks;
pub use task::{Decider, PendingReview, Reason, Status, TaskRecord, UserRef, WaitingReview};
pub use threads::{mark_turn_thread, turn_runtime};
pub use wasm::{ComponentsLoaded, async_runtime, check_components};
pub use watch::{HostToolError, HostTools, Watcher};

use plan::{AgentPlan, EventPlan, Target, ToolPlan};
use providers::Providers;
use review::Waiter;
use task::{Crashed, Resume};

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
    /// The configuration cannot run, for a reason at this place of a manifest (an `openapi`
    /// document that does not load, an operation it does not have).
    #[error("{0}")]
    Manifest(agentmesh_manifest::Diagnostic),
    /// The caller's input is invalid.
    #[error("invalid input: {0}")]
    Input(String),
    /// No such task, agent or review.
    #[error("not found: {0}")]
    NotFound(String),
    /// The task cannot take this request in its state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The caller may not do this.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The host failed (a worker thread ended, a component cannot be loaded for a reason
    /// outside the config).
    #[error("internal: {0}")]
    Internal(String),
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
    /// Where the engine publishes the secrets of the plan in force, at start and at every
    /// reload, for output it does not write itself (the log writer scrubs with them).
    pub secrets: SharedSecrets,
    /// The turn pool ([`turn_runtime`]) task runners start on; `None`: the runtime of whoever
    /// queues the input.
    pub turns: Option<tokio::runtime::Handle>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            mount_root: PathBuf::from(".agentmesh/mounts"),
            review_timeout: None,
            runtime: json!({"version": env!("CARGO_PKG_VERSION"), "dashboard_url": "", "api_root": ""}),
            component_cache: None,
            secrets: SharedSecrets::default(),
            turns: None,
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
    /// Set on an entry that is no input but the task's lock, for this reason (its event
    /// middleware asked for it: [`door::Input::lock`]). Queued ahead of every input, it locks
    /// the task before anything else of it runs, on whichever host runs it next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
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
    store: Arc<dyn Backend>,
    providers: Providers,
    options: EngineOptions,
    /// One lock per task: a turn holds it, so turns of one task never overlap.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Tasks whose running turn must stop at its next step, with who asks it (see
    /// [`StopRequest`]).
    interrupts: Mutex<HashMap<String, Stops>>,
    /// Woken whenever a task is asked to stop (a turn waiting in a review listens).
    stop_asked: tokio::sync::Notify,
    /// The delegating task of each child task whose turn a parent's call waits for: a
    /// request that the parent stop reaches the child's turn too.
    delegations: Mutex<HashMap<String, String>>,
    /// Tasks with a runner (see [`Engine::kick`]); `true`: more input arrived while it ran.
    runners: Mutex<HashMap<String, bool>>,
    /// What is kept in step with the task records (see [`watch`]).
    watchers: RwLock<Vec<Arc<dyn Watcher>>>,
    /// Reviews waiting for a decision, by review id.
    reviews: Mutex<HashMap<String, Waiter>>,
    http: reqwest::Client,
    /// The Wasm plugin host, started on first use (`Err`: why it could not start).
    plugins: OnceLock<std::result::Result<Arc<wasm::Plugins>, String>>,
    /// Each task's sessions with MCP servers.
    mcp: mcp::McpSessions,
    /// Each task's remote sessions of `stateful_session` tools.
    sessions: session::Sessions,
    /// What the pollers and the MCP event sessions are doing.
    sources: sources::Sources,
    /// The tokens of auth providers.
    auth: auth::AuthTokens,
    /// The host tools another crate runs (see [`watch`]).
    host_tools: RwLock<Option<Arc<dyn HostTools>>>,
    /// The locks of delivery ids, for arrivals (see [`door`]).
    door: door::Door,
    /// Tasks whose running turn was not typed by a human (its input has a trigger envelope).
    triggered: Mutex<HashSet<String>>,
    /// The tasks of the client sessions open on this host (see [`Engine::open_session`]):
    /// ended when the host stops, as their sessions end with it.
    client_sessions: Mutex<HashSet<String>>,
    /// Task records: reads through a cache, journals, writes.
    records: records::Records,
    /// This host among those sharing the store (see [`hosts`]).
    hosts: hosts::Hosts,
    /// `options.runtime`, bound once for every activation that reads it.
    runtime: Bound,
    /// Whether [`Engine::recover`] recorded this host as running (cleared by a clean stop).
    marked_running: AtomicBool,
    /// Whether [`Engine::recover`] has given the watchers every record.
    recovered: AtomicBool,
}

/// The store's host-state namespace of the host's own marks.
const HOST_STATE: &str = "host";

/// The mark of a running host: present at a start means the last one went down.
const RUNNING_KEY: &str = "running";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Engine {
    /// An engine over `plan` and `store`.
    pub fn new(plan: Plan, store: Arc<dyn Backend>, options: EngineOptions) -> Engine {
        agentmesh_expr::budget::offload_iterating_with(threads::off_the_workers);
        let runtime = Bound::new(options.runtime.clone());
        options.secrets.set(Arc::clone(&plan.secrets));
        let hosts = hosts::Hosts::new();
        if store.shared() {
            store.set_notice_hook(hosts.hook());
        }
        let store: Arc<dyn Backend> = Arc::new(Offloaded::new(store, threads::store_call));
        let records = records::Records::new(Arc::clone(&store), options.secrets.clone());
        let sources = sources::Sources::new(options.secrets.clone());
        let mcp_sessions = mcp::McpSessions::new(options.secrets.clone());
        Engine {
            inner: Arc::new(Inner {
                plan: RwLock::new(Arc::new(plan)),
                store,
                providers: Providers::default(),
                options,
                locks: Mutex::new(HashMap::new()),
                interrupts: Mutex::new(HashMap::new()),
                stop_asked: tokio::sync::Notify::new(),
                delegations: Mutex::new(HashMap::new()),
                runners: Mutex::new(HashMap::new()),
                watchers: RwLock::new(Vec::new()),
                reviews: Mutex::new(HashMap::new()),
                // Building fails only if TLS cannot start, as `Client::new` would.
                http: agentmesh_llm::http_client()
                    .redirect(runtime::same_origin_redirects())
                    .build()
                    .unwrap_or_default(),
                plugins: OnceLock::new(),
                mcp: mcp_sessions,
                sessions: session::Sessions::new(),
                sources,
                auth: auth::AuthTokens::default(),
                host_tools: RwLock::new(None),
                door: door::Door::default(),
                triggered: Mutex::new(HashSet::new()),
                client_sessions: Mutex::default(),
                marked_running: AtomicBool::new(false),
                recovered: AtomicBool::new(false),
                records,
                hosts,
                runtime,
            }),
        }
    }

    /// The `runtime` variable of expressions.
    fn runtime_variable(&self) -> Bound {
        self.inner.runtime.clone()
    }

    /// The plugin host, started on first use.
    fn plugins(&self) -> std::result::Result<Arc<wasm::Plugins>, String> {
        self.inner
            .plugins
            .get_or_init(|| {
                wasm::Plugins::new(
                    Arc::clone(&self.inner.store),
                    self.inner.options.component_cache.clone(),
                    &self.plan().host.policy,
                    self.inner.options.secrets.clone(),
                )
                .map(Arc::new)
                .map_err(|e| format!("the Wasm plugin host could not start: {e}"))
            })
            .clone()
    }

    /// Tears down every open tool session (Teardown) and records that this host stopped
    /// cleanly (see [`Engine::recover`]); call before the process exits.
    pub async fn shutdown(&self) {
        // Their clients' sessions end with the host: so do their tasks (a session's task
        // left open would be an orphan no client can reach again).
        let open: Vec<String> = lock(&self.inner.client_sessions).drain().collect();
        for id in open {
            if let Err(e) = self.close_session(&id).await {
                tracing::warn!(task.id = %id, "ending a client session's task: {e}");
            }
        }
        if let Some(Ok(p)) = self.inner.plugins.get() {
            p.close_all().await;
        }
        self.inner.mcp.close_all().await;
        self.inner.sessions.close_all(self).await;
        if self.inner.store.shared() {
            // Idle tasks are given up; busy ones pass to another host at once.
            if let Err(e) = self.inner.store.end_host() {
                tracing::warn!("could not hand this host's tasks on: {e}");
            }
        } else if self.inner.marked_running.swap(false, Ordering::SeqCst)
            && let Err(e) = self
                .inner
                .store
                .delete_state_durably(HOST_STATE, RUNNING_KEY)
        {
            tracing::warn!("could not record the clean stop: {e}");
        }
    }

    /// The secrets of the plan in force, for text that leaves the host by another way than
    /// the log (which scrubs every event): a client's answer, a record, a quoted answer.
    pub(crate) fn secrets(&self) -> Arc<agentmesh_secrets::Secrets> {
        self.inner.options.secrets.get()
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
    pub async fn reload(&self, plan: Plan) -> Result<()> {
        self.install_components(&plan).await?;
        self.inner.options.secrets.set(Arc::clone(&plan.secrets));
        *self
            .inner
            .plan
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(plan);
        // Models are made anew from the new plan: changed scripts, endpoints and keys apply
        // to the next LLM call (a call in flight finishes on the provider it has).
        self.inner.providers.clear();
        self.rebuild_watchers()?;
        for w in self.watchers().iter() {
            w.reloaded(self)?;
        }
        Ok(())
    }

    /// Loads every component of the plan in force (compiling it, or reading the compiled
    /// cache), so the first call does not pay for it and a broken one shows at start.
    pub async fn load_components(&self) -> Result<()> {
        let plan = self.plan();
        self.install_components(&plan).await
    }

    async fn install_components(&self, plan: &Plan) -> Result<()> {
        let paths = plan.components();
        if paths.is_empty() {
            return Ok(());
        }
        let plugins = self.plugins().map_err(EngineError::Internal)?;
        let loader = Arc::clone(&plugins);
        let loaded = tokio::task::spawn_blocking(move || loader.preload(&paths))
            .await
            .map_err(|e| EngineError::Internal(format!("loading components: {e}")))?
            .map_err(EngineError::Config)?;
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

    /// The Wasm instance pool's size and each component's instances, evictions and calls;
    /// `None` until the plugin host has started (the first component loaded).
    pub fn pool_metrics(&self) -> Option<PoolMetrics> {
        match self.inner.plugins.get() {
            Some(Ok(p)) => Some(p.pool_metrics()),
            _ => None,
        }
    }

    /// Where compiled components are cached, if anywhere.
    pub fn component_cache(&self) -> Option<&Path> {
        self.inner.options.component_cache.as_deref()
    }

    /// The store.
    pub fn store(&self) -> &dyn Backend {
        self.inner.store.as_ref()
    }

    /// Makes every write so far durable. The fsync (and, while another caller's runs, the wait
    /// for it) holds up no async worker.
    pub fn flush(&self) -> std::result::Result<(), StoreError> {
        let mut flushed = Ok(());
        threads::off_the_workers(&mut || flushed = self.inner.store.flush());
        flushed
    }

    /// The plan of agent `id` (`namespace/name`) in force.
    pub fn agent(&self, id: &str) -> Result<Arc<AgentPlan>> {
        self.plan()
            .agents
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::NotFound(format!("agent `{id}`")))
    }

    /// Task `id`'s record.
    pub fn task(&self, id: &str) -> Result<TaskRecord> {
        self.records().peek(id, TaskRecord::clone)
    }

    /// Task `id`'s events after `after`.
    pub fn events(&self, id: &str, after: u64) -> Result<Vec<Event>> {
        Ok(self.inner.store.events(id, after)?)
    }

    /// The conversation task `id`'s next LLM call is sent, as its log stands (as written):
    /// the system prompt, the last condensation summary, the events since. It is read as a
    /// turn reads it: after a condensation, from the system prompt and the events past the
    /// forgotten range only.
    pub fn conversation(&self, id: &str) -> Result<Vec<agentmesh_llm::ChatMessage>> {
        let mut record = self.records().stored_record(id)?;
        self.records().log_view(&mut record)?;
        Ok(agentmesh_llm::to_messages(record.journal.view()))
    }

    /// Task `id`'s sessions of MCP servers on this host (what `mcp` tools opened for it), by
    /// tool.
    pub fn mcp_sessions(&self, id: &str) -> Vec<McpSessionView> {
        self.inner.mcp.of_task(id)
    }

    /// What the pollers of `receive.poll` events and the sessions receiving MCP resource
    /// updates are doing; they report to it.
    pub fn event_sources(&self) -> &sources::Sources {
        &self.inner.sources
    }

    /// Task `id`'s queued inputs, the next first, at most `limit`.
    pub fn queued_inputs(&self, id: &str, limit: usize) -> Result<Vec<QueuedInput>> {
        self.inner
            .store
            .queued(id, limit)?
            .into_iter()
            .map(|(_, input)| Ok(serde_json::from_slice(&input).map_err(StoreError::from)?))
            .collect()
    }

    /// Whether a person sent any of task `id`'s queued input (it has no trigger envelope).
    fn person_waits(&self, id: &str) -> Result<bool> {
        let queued = self.queued_inputs(id, usize::MAX)?;
        Ok(queued.iter().any(|input| input.trigger.is_none()))
    }

    /// `f` of task `id`'s record, read in place (no copy), and of its queue depth.
    pub fn read_task<T>(&self, id: &str, f: impl FnOnce(&TaskRecord, usize) -> T) -> Result<T> {
        let queued = self.inner.store.queued_count(id)?;
        self.records().peek(id, |record| f(record, queued))
    }

    /// Creates a task and queues its first input (when given), as a user's, run as `run` says.
    /// Bound parameters' allow lists are sealed now, to the bindings' values. When the input
    /// cannot be queued the task is deleted again before the error is returned: the caller,
    /// told no task was made, does not know its id, and it must not live on (subscribed to
    /// events, running turns on them).
    pub async fn create_task(&self, new: NewTask, run: Run) -> Result<TaskRecord> {
        self.create(new, None, 0, run).await
    }

    async fn create(
        &self,
        new: NewTask,
        parent: Option<&str>,
        depth: u32,
        run: Run,
    ) -> Result<TaskRecord> {
        let agent = self.agent(&new.agent)?;
        let io = match new.input {
            Some(input) => Some(normalize_input(&agent, input)?),
            None => None,
        };
        let id = self.new_task_id()?;
        let record = self.open_record(&id, &agent, new.user, parent, depth)?;
        // Its first turn starts from memory.
        let record = self.records().checkin(record);
        if let Some(io) = io
            && let Err(e) = self.queue(&id, io, Origin::User, run).await
        {
            if let Err(deleting) = self.delete_task(&id).await {
                tracing::error!(task.id = %id, "a task whose first input could not be queued ({e}) could not be deleted: {deleting}");
            }
            return Err(e);
        }
        Ok(TaskRecord::clone(&record))
    }

    /// A new task id, unique also across restarts and hosts sharing the store. Input may be
    /// queued for it before its record exists (a schedule's tick): its runner then makes the
    /// record from the schedule.
    pub fn new_task_id(&self) -> Result<String> {
        Ok(format!(
            "t_{:x}{:06x}",
            now_ms(),
            self.inner.store.next_id()?
        ))
    }

    /// Writes the record of new task `id` of `agent` for `user` (its first write, which takes
    /// its lease on a shared store) and returns it, to be checked in.
    fn open_record(
        &self,
        id: &str,
        agent: &AgentPlan,
        user: UserRef,
        parent: Option<&str>,
        depth: u32,
    ) -> Result<TaskRecord> {
        let mut record = TaskRecord {
            id: id.to_owned(),
            agent: agent.id(),
            user,
            status: Some(Status::Idle),
            created_at: now_rfc3339(),
            created_ms: now_ms(),
            parent: parent.map(str::to_owned),
            depth,
            last_activity_ms: now_ms(),
            subscriptions: subscription::for_agent(agent),
            journal: journal::Journal::new_task(),
            ..TaskRecord::default()
        };
        self.seal_allow_lists(agent, &mut record);
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
        // Its first write takes its lease (see `hosts`).
        self.records().save(&mut record, events)?;
        self.inner.hosts.wrote(self.inner.store.as_ref(), id);
        self.tell_watchers(&record);
        Ok(record)
    }

    /// Task `id`'s record, made now for the input queued for it before it had one: a
    /// schedule's tick is queued, and claimed across hosts, in one write for a task id of its
    /// own, so that a host dying right after the claim leaves the tick's input for the host
    /// that takes it over (see [`hosts`]) rather than losing it. The task is the schedule's,
    /// as the input's envelope names it, returned with that input (the head of its queue).
    /// `None` when nothing is queued; input that no schedule of the plan explains is dropped,
    /// with a warning.
    fn adopt(&self, id: &str) -> Result<Option<(TaskRecord, (QueueKey, QueuedInput))>> {
        let Some((key, input)) = self.inner.store.next_queued::<QueuedInput>(id)? else {
            return Ok(None);
        };
        let plan = self.plan();
        let schedule = input
            .trigger
            .as_ref()
            .filter(|t| t.source == door::SCHEDULE_SOURCE)
            .and_then(|t| t.schedule_id.as_deref())
            .and_then(|s| plan.schedules.get(s));
        let agent = schedule.map(|s| self.agent(&s.agent));
        match (schedule, agent) {
            (Some(s), Some(Ok(agent))) => {
                let owner = UserRef {
                    id: s.owner.clone(),
                    email: None,
                };
                let record = self.open_record(id, &agent, owner, None, 0)?;
                Ok(Some((record, (key, input))))
            }
            (_, agent) => {
                let why = match agent {
                    Some(Err(e)) => e.to_string(),
                    _ => "no schedule of the config queued it".to_owned(),
                };
                let dropped = self.clear_queue(id)?;
                self.flush()?;
                tracing::warn!(
                    task.id = %id,
                    "dropped {dropped} queued inputs of a task that has no record: {why}"
                );
                Ok(None)
            }
        }
    }

    /// Evaluates every binding at task start and seals its allow-list entry to the value.
    fn seal_allow_lists(&self, agent: &AgentPlan, record: &mut TaskRecord) {
        if agent.capabilities.iter().all(|c| c.bindings.is_empty()) {
            return;
        }
        // Only the parts of the context the bindings read.
        let mut needs = Needs::default();
        for cap in &agent.capabilities {
            cap.bindings
                .iter()
                .for_each(|(_, e)| needs.add(e, &["context", "c"]));
        }
        let mut act = Activation::new();
        act.set_aliased("context", "c", record.context_for(agent, &needs))
            .bind("runtime", self.runtime_variable())
            .set("now", json!(now_rfc3339()));
        for cap in &agent.capabilities {
            let Target::Tool(tool) = &cap.target else {
                continue;
            };
            for (name, expr) in &cap.bindings {
                let value = expr
                    .evaluate(&act)
                    .ok()
                    .map(|v| agentmesh_model::allow_list::allow_value(&v));
                record.allow(&tool.id(), name, value);
                record
                    .sealed
                    .entry(tool.id())
                    .or_default()
                    .insert(name.clone());
            }
        }
    }

    /// Queues `input` (`{"message": …, …params}`) for task `id` through the door every
    /// arrival takes, on disk before it returns, run as `run` says; returns `queued_at`.
    pub async fn submit(&self, id: &str, input: Value, origin: Origin, run: Run) -> Result<i64> {
        let (status, agent) = self.records().peek(id, |r| (r.status(), r.agent.clone()))?;
        if status == Status::Terminated {
            return Err(EngineError::Conflict(format!("task `{id}` is terminated")));
        }
        let agent = self.agent(&agent)?;
        let io = normalize_input(&agent, input)?;
        self.queue(id, io, origin, run).await
    }

    /// Queues `io`, normalized, for task `id` through the door.
    async fn queue(&self, id: &str, io: Value, origin: Origin, run: Run) -> Result<i64> {
        let input = door::Input::new(id.to_owned(), io, origin);
        match door::Arrival::new().accept(self, vec![input], run).await? {
            door::Accepted::Queued { queued_at, .. } => Ok(queued_at),
            // Only an arrival with a delivery id can be a repeat.
            door::Accepted::Duplicate => Err(EngineError::Internal(format!(
                "input for task `{id}` was taken for a repeated delivery"
            ))),
        }
    }

    /// Processes task `id`'s queued inputs, in order, until none is left or the task
    /// terminates; returns the record. Concurrent callers for one task take turns.
    ///
    /// On a store other hosts share, the turns run on the host holding the task's lease: when
    /// that is another live host, it is told to run them, and the record is returned as it is.
    pub async fn run_until_idle(&self, id: &str) -> Result<Arc<TaskRecord>> {
        let ran = self.run_turns(id).await;
        if ran.is_err() {
            // It may have taken an input out of the known queue without running it.
            self.records().forget_queue(id);
        }
        ran
    }

    /// [`Engine::run_until_idle`]'s turns.
    async fn run_turns(&self, id: &str) -> Result<Arc<TaskRecord>> {
        let (_turn, holder) = self.hold_task(id).await?;
        if let hosts::Holder::Elsewhere(host) = holder {
            self.inner
                .hosts
                .kick(self.inner.store.as_ref(), &host, id)?;
            return self.records().peek(id, |r| Arc::new(r.clone()));
        }
        // The head of the queue, when read, is the first input when the runner asks for one.
        let (mut record, mut head) = match self.records().checkout(id) {
            Err(EngineError::NotFound(what)) => match self.adopt(id)? {
                Some((record, head)) => (record, Some(head)),
                None => return Err(EngineError::NotFound(what)),
            },
            checked_out => {
                // A lock waits ahead of every input (see `door::Input::lock`), also of a turn
                // to resume or a review pending: a queue known here holds none (the door's
                // lock makes it unknown).
                let head = match self.records().queue_known(id) {
                    true => None,
                    false => self.inner.store.next_queued::<QueuedInput>(id)?,
                };
                (checked_out?, head)
            }
        };
        if let Some(reason) = head.as_ref().and_then(|(_, input)| input.lock.clone()) {
            return self.lock_held(record, &reason).await;
        }
        loop {
            if self.interrupt_requested(id) {
                return Ok(self.records().checkin(record));
            }
            // A review pending across a restart holds the turn: input waits for the decision,
            // which resumes the turn (`resume`).
            if record.status() == Status::Waiting {
                return Ok(self.records().checkin(record));
            }
            let work = match record.resume.take() {
                Some(resume) if record.status() == Status::Running => Work::Resume(resume),
                // An interrupted task takes no input until a person sends some: what no
                // person sent (an event queued before the interrupt, a wakeup) waits.
                _ if record.interrupted && !self.person_waits(id)? => {
                    return Ok(self.records().checkin(record));
                }
                _ => {
                    let next = match self.records().next_input(id) {
                        known::Next::Input(key, input) => Some((key, *input)),
                        known::Next::Idle => None,
                        known::Next::Ask => match head.take() {
                            Some(head) => Some(head),
                            None => self.inner.store.next_queued::<QueuedInput>(id)?,
                        },
                    };
                    let Some((key, input)) = next else {
                        return Ok(self.records().checkin(record));
                    };
                    // Another host's, or this one's that the task's turn ran before.
                    if let Some(reason) = &input.lock {
                        return self.lock_held(record, reason).await;
                    }
                    record.journal.hold(key);
                    if record.status() == Status::Terminated {
                        record.journal.take_held();
                        self.records().save(&mut record, Vec::new())?;
                        continue;
                    }
                    Work::Input(input)
                }
            };
            let agent = self.agent(&record.agent)?;
            let triggered = match &work {
                Work::Input(input) => input.trigger.is_some(),
                Work::Resume(resume) => resume.triggered,
            };
            if triggered {
                lock(&self.inner.triggered).insert(id.to_owned());
            }
            if record.crashed.is_some() {
                // Durable before the turn runs: if it brings the host down again, the next
                // start ends the task instead of running it once more.
                record.crashed = Some(Crashed::Retried);
                self.records().save(&mut record, Vec::new())?;
                self.flush()?;
            }
            let ran = match work {
                Work::Input(input) => turn::run(self, &agent, &mut record, input).await,
                Work::Resume(resume) => {
                    // Written (without `resume`, taken above) before the call runs again: if
                    // the host stops during it, the next start reports the call as interrupted
                    // instead of running it again.
                    match self.records().save(&mut record, Vec::new()) {
                        Ok(()) => turn::resume(self, &agent, &mut record, &resume).await,
                        Err(e) => Err(e),
                    }
                }
            };
            if triggered {
                lock(&self.inner.triggered).remove(id);
            }
            self.tell_watchers(&record);
            ran?;
            if record.crashed.take().is_some() {
                self.records().save(&mut record, Vec::new())?;
            }
            // A turn that stopped early (an interrupt) keeps what it did; an input it stopped
            // before logging is done with all the same.
            record.journal.take_held();
            self.records().write_ahead(&mut record)?;
            if record.status() == Status::Terminated {
                self.close_task_sessions(&record.id).await;
            }
        }
    }

    /// Runs task `id`'s queued input in the background (on the turn pool, else the current
    /// tokio runtime), unless a runner for it is already going; that runner then picks the new
    /// input up. Input is queued, and its runner woken, only by the door ([`door`]); the engine
    /// itself wakes a runner to go on with input already queued (after an interrupt, a restart,
    /// a review) or queued by another host: the runner reads the task's queue from the store.
    fn kick(&self, id: &str) {
        self.records().forget_queue(id);
        self.wake(id);
    }

    /// Wakes task `id`'s runner (see [`Engine::kick`]) for input the door queued on this host,
    /// which it told the records of (`Records::queued`).
    fn wake(&self, id: &str) {
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
        let runner = async move {
            loop {
                match engine.run_until_idle(&id).await {
                    Ok(_) => {}
                    Err(EngineError::Store(StoreError::LeaseLost(e))) => {
                        tracing::warn!(task.id = %id, "task runner stopped: {e}");
                        engine.forget_task(&id);
                    }
                    Err(e) => tracing::error!(task.id = %id, "task runner failed: {e}"),
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
        };
        match &self.inner.options.turns {
            Some(turns) => drop(turns.spawn(runner)),
            None => drop(tokio::spawn(runner)),
        }
    }

    /// Whether a turn of task `id` is running or about to run.
    pub fn is_busy(&self, id: &str) -> bool {
        lock(&self.inner.runners).contains_key(id)
    }

    /// Interrupts task `id`: its running turn stops at the next step, and its subscriptions
    /// are suspended until it takes new input. Returns once the interrupt is recorded.
    pub async fn interrupt(&self, id: &str) -> Result<()> {
        if self.records().peek(id, TaskRecord::status)? == Status::Terminated {
            return Err(EngineError::Conflict(format!("task `{id}` is terminated")));
        }
        let request = hosts::Request::Interrupt {
            task: id.to_owned(),
        };
        let Some(turn) = self.stop_here(id, Some(request)).await? else {
            return Ok(());
        };
        let mut record = self.records().checkout(id)?;
        if record.status() == Status::Terminated {
            self.records().checkin(record);
            return Ok(());
        }
        let mut events =
            self.end_suspended_turn(&mut record, "not run: the task was interrupted")?;
        if !events.is_empty() {
            events.push(task::status_event("idle"));
        }
        record.interrupted = true;
        if record.status() != Status::Idle {
            record.status = Some(Status::Idle);
        }
        events.extend([
            (EventSource::User, EventKind::PauseEvent {}),
            (
                EventSource::Environment,
                EventKind::ConversationStateUpdateEvent {
                    key: "subscriptions_removed".into(),
                    value: json!({"reason": "interrupt"}),
                },
            ),
        ]);
        self.records().save(&mut record, events)?;
        self.tell_watchers(&record);
        drop(turn);
        if self.inner.store.queued_count(id)? > 0 {
            self.kick(id);
        }
        Ok(())
    }

    /// Whether task `id` was asked to stop its running turn, or a task whose call waits for
    /// its turn (a delegation, at any depth) was.
    pub(crate) fn interrupt_requested(&self, id: &str) -> bool {
        let stops = lock(&self.inner.interrupts);
        if stops.is_empty() {
            return false;
        }
        if stops.contains_key(id) {
            return true;
        }
        let parents = lock(&self.inner.delegations);
        let mut at = id;
        // Each step goes one delegation up; depth is bounded by `MAX_DELEGATION_DEPTH`.
        while let Some(parent) = parents.get(at) {
            if stops.contains_key(parent) {
                return true;
            }
            at = parent;
        }
        false
    }

    /// Records that `parent`'s call waits for `child`'s turn, until the returned guard drops.
    pub(crate) fn delegating(&self, parent: &str, child: &str) -> Delegation<'_> {
        lock(&self.inner.delegations).insert(child.to_owned(), parent.to_owned());
        Delegation {
            engine: self,
            child: child.to_owned(),
        }
    }

    /// Asks task `id`'s running turn to stop at its next step (a review it waits in ends),
    /// until the request is dropped: when its caller holds the task, or gives up midway.
    fn ask_to_stop(&self, id: &str) -> StopRequest<'_> {
        self.stop_request(id, false)
    }

    /// Asks the client's call running in task `id` to stop, as [`Engine::ask_to_stop`] asks a
    /// turn: its client cancelled it.
    pub(crate) fn cancel_call(&self, id: &str) -> StopRequest<'_> {
        self.stop_request(id, true)
    }

    fn stop_request(&self, id: &str, cancel: bool) -> StopRequest<'_> {
        let mut all = lock(&self.inner.interrupts);
        let stops = all.entry(id.to_owned()).or_default();
        stops.asked += 1;
        stops.cancels += usize::from(cancel);
        drop(all);
        self.inner.stop_asked.notify_waiters();
        StopRequest {
            engine: self,
            id: id.to_owned(),
            cancel,
        }
    }

    /// Whether the client's call running in task `id` was cancelled.
    pub(crate) fn call_cancelled(&self, id: &str) -> bool {
        lock(&self.inner.interrupts)
            .get(id)
            .is_some_and(|s| s.cancels > 0)
    }

    /// Resolves once task `id` is asked to stop.
    pub(crate) async fn stop_asked(&self, id: &str) {
        loop {
            let asked = self.inner.stop_asked.notified();
            let mut asked = std::pin::pin!(asked);
            // Registered before the look, so a request made between the two is not missed.
            asked.as_mut().enable();
            if self.interrupt_requested(id) {
                return;
            }
            asked.await;
        }
    }

    /// Deletes task `id`: it terminates with reason `deleted`, its queue is cleared and its
    /// subscriptions removed; so are the child tasks it delegated to, and theirs (a child
    /// lives for its parent: left alone, one that subscribed to events would go on running
    /// turns for a task that is gone). Their records and logs stay readable.
    pub async fn delete_task(&self, id: &str) -> Result<()> {
        self.end_task(id, None).await?;
        self.delete_children(id).await
    }

    /// Deletes the child tasks task `id` delegated to (see [`Engine::delete_task`]).
    async fn delete_children(&self, id: &str) -> Result<()> {
        let children: BTreeSet<String> = self.records().peek(id, |record| {
            record
                .capabilities
                .values()
                .filter_map(|stats| stats.task_ids.as_ref())
                .flatten()
                .cloned()
                .collect()
        })?;
        for child in children {
            let parent = self.records().peek(&child, |r| r.parent.clone());
            match parent {
                Ok(Some(parent)) if parent == id => Box::pin(self.delete_task(&child)).await?,
                // Not its child after all, or gone: nothing to end.
                Ok(_) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Locks task `id` for `reason`, as a step failing with `lock_task` in its turn would: its
    /// running turn stops at its next step, its queue is cleared, and it terminates with
    /// reason `locked`. Event middleware asks this of a task (a routed event's step failed
    /// with `lock_task`). A task that has ended already is left as it is.
    pub async fn lock_task(&self, id: &str, reason: &str) -> Result<()> {
        self.task(id)?;
        let request = hosts::Request::Lock {
            task: id.to_owned(),
            reason: reason.to_owned(),
        };
        let Some(_turn) = self.stop_here(id, Some(request)).await? else {
            return Ok(());
        };
        let record = self.records().checkout(id)?;
        self.lock_held(record, reason).await?;
        Ok(())
    }

    /// [`Engine::lock_task`] of `task`, in the background: the door asks it for a lock it has
    /// written ([`door::Input::lock`]), as the task's running turn must reach its next step
    /// first and the arrival is answered without waiting for that.
    pub(crate) fn lock_in_background(&self, task: String, reason: String) {
        let engine = self.clone();
        tokio::spawn(async move {
            if let Err(e) = engine.lock_task(&task, &reason).await {
                tracing::warn!(task.id = %task, "not locked: {e}");
            }
        });
    }

    /// Locks task `record` (checked out, its task's lock held) for `reason`: its queue is
    /// cleared (a lock waiting in it too) and it terminates with reason `locked`; one that has
    /// ended already is left as it is, but for its queue (a terminated task runs none of it).
    /// Returns the record, checked in.
    async fn lock_held(&self, mut record: TaskRecord, reason: &str) -> Result<Arc<TaskRecord>> {
        let dropped = self.clear_queue(&record.id)?;
        if record.status() == Status::Terminated {
            if dropped > 0 {
                self.flush()?;
            }
            return Ok(self.records().checkin(record));
        }
        tracing::info!(task.id = %record.id, "locked: {reason}");
        let mut events = self.end_suspended_turn(&mut record, "not run: the task was locked")?;
        turn::terminate(&mut record, Reason::Locked, None, reason, &mut events);
        self.records().save(&mut record, events)?;
        self.tell_watchers(&record);
        let record = self.records().checkin(record);
        self.close_task_sessions(&record.id).await;
        Ok(record)
    }

    /// Asks task `id`'s running turn to stop, and waits for the task's lock: the lock when
    /// this host holds the task; `None` when another host does, which has been asked
    /// `elsewhere` (when given) and has answered. The stop request is withdrawn once the task
    /// is held (or given up midway).
    async fn stop_here(
        &self,
        id: &str,
        elsewhere: Option<hosts::Request>,
    ) -> Result<Option<tokio::sync::OwnedMutexGuard<()>>> {
        let stop = self.ask_to_stop(id);
        let held = self.hold_task(id).await;
        drop(stop);
        match held? {
            (turn, hosts::Holder::Here { .. }) => Ok(Some(turn)),
            (turn, hosts::Holder::Elsewhere(host)) => {
                if let Some(request) = elsewhere {
                    self.ask(&host, request).await?;
                }
                drop(turn);
                Ok(None)
            }
        }
    }

    /// Deletes task `id` as [`Engine::delete_task`] does; with `why` (an event saying why it
    /// ends), a task that has ended already is left as it is, and `why` is logged first.
    async fn end_task(&self, id: &str, why: Option<(EventSource, EventKind)>) -> Result<()> {
        self.task(id)?;
        // A session's end is left to the host that holds its task, as it sees fit.
        let request = why.is_none().then(|| hosts::Request::Delete {
            task: id.to_owned(),
        });
        let Some(_turn) = self.stop_here(id, request).await? else {
            return Ok(());
        };
        let mut record = self.records().checkout(id)?;
        if why.is_some() && record.status() == Status::Terminated {
            self.records().checkin(record);
            return Ok(());
        }
        self.clear_queue(id)?;
        let mut events: Vec<_> = why.into_iter().collect();
        events.extend(self.end_suspended_turn(&mut record, "not run: the task ended")?);
        delete(&mut record, &mut events);
        if events.is_empty() {
            self.records().checkin(record);
        } else {
            self.records().save(&mut record, events)?;
            self.tell_watchers(&record);
        }
        for w in self.watchers().iter() {
            w.deleted(self, id)?;
        }
        self.close_task_sessions(id).await;
        // What its components kept for it goes with it (their sessions are closed: none
        // writes again).
        self.inner.store.kv_clear_task_buffered(id)?;
        Ok(())
    }

    /// Tears down every tool session of task `id` — its Wasm components', its MCP servers'
    /// and its remote sessions (it ended).
    pub(crate) async fn close_task_sessions(&self, id: &str) {
        if let Some(Ok(p)) = self.inner.plugins.get() {
            p.close_task(id).await;
        }
        self.inner.mcp.close_task(id).await;
        self.inner.sessions.close_task(self, id).await;
    }

    /// How long a `review()` in task `id`'s running turn waits: the configured timeout, or
    /// in a triggered turn at most [`TRIGGERED_REVIEW_TIMEOUT`].
    pub(crate) fn review_timeout(&self, id: &str) -> Option<Duration> {
        self.timeout_of_review(self.is_triggered(id))
    }

    /// Whether task `id`'s running turn is a triggered one (its input has a trigger envelope).
    pub(crate) fn is_triggered(&self, id: &str) -> bool {
        lock(&self.inner.triggered).contains(id)
    }

    /// How long a review waits, in a triggered turn or not.
    fn timeout_of_review(&self, triggered: bool) -> Option<Duration> {
        match self.inner.options.review_timeout {
            Some(t) => Some(t),
            None if triggered => Some(TRIGGERED_REVIEW_TIMEOUT),
            None => None,
        }
    }

    /// When `review` times out (epoch ms), counted from its request; `None`: never.
    fn review_deadline(&self, review: &PendingReview) -> Option<i64> {
        let timeout = self.timeout_of_review(review.triggered)?;
        let timeout = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        Some(review.requested_ms.saturating_add(timeout))
    }

    /// The reviews waiting for a decision that `decider` may make, oldest first.
    pub fn pending_reviews(&self, decider: Decider<'_>) -> Result<Vec<WaitingReview>> {
        let mut reviews: Vec<WaitingReview> = self
            .list_tasks(None, Some(Status::Waiting), None)?
            .into_iter()
            .filter_map(|t| {
                let review = t.pending_review?;
                review.may_decide(&decider).then_some(WaitingReview {
                    task_id: t.id,
                    agent: t.agent,
                    review,
                })
            })
            .collect();
        reviews.sort_by_key(|r| r.review.requested_ms);
        Ok(reviews)
    }

    /// Every task, optionally only those of `agent`, in `status`, or owned by `owner`.
    pub fn list_tasks(
        &self,
        agent: Option<&str>,
        status: Option<Status>,
        owner: Option<&str>,
    ) -> Result<Vec<TaskRecord>> {
        Ok(self
            .records()
            .stored_records()?
            .into_iter()
            .filter(|t| agent.is_none_or(|a| t.agent == a))
            .filter(|t| status.is_none_or(|s| t.status() == s))
            .filter(|t| owner.is_none_or(|o| t.user.id == o))
            .collect())
    }

    /// Brings tasks back after a restart: a task that was mid-turn is set idle, every call
    /// it made without a result is reported to the LLM as interrupted (never silently re-run),
    /// and every task with queued input is started. A task waiting in a review of a call's
    /// `before_first` or `before` steps keeps waiting: its decision ([`Engine::decide_review`])
    /// resumes the turn, and its timeout counts from the request (one that passed while the
    /// host was down is a denial now); one decided whose call had not run again yet resumes.
    ///
    /// No turn can bring the host down over and over: when the host went down without shutting
    /// down (no [`Engine::shutdown`] since the last start), every task that had a turn running
    /// or input waiting is marked; its next turn is written as started (durably) before it
    /// runs, and a task whose turn was running when the host went down again is ended with
    /// `reason: error` and an event saying why. A turn that ends clears the mark.
    ///
    /// Returns how many tasks were started. Call once, on a runtime, at start.
    ///
    /// On a store other hosts share, a task another live host holds is left to it; the rest
    /// are brought back as the turns of a host that went down.
    pub fn recover(&self) -> Result<usize> {
        let shared = self.inner.store.shared();
        let crashed = !shared && self.mark_running()?;
        let mut resumed = HashSet::new();
        let mut in_flight = HashSet::new();
        for mut record in self.records().stored_records()? {
            let stopped = record.crashed == Some(Crashed::Retried)
                && record.status() != Status::Terminated
                || matches!(record.status(), Status::Running | Status::Waiting);
            if !stopped {
                continue;
            }
            if shared {
                let holder = self
                    .inner
                    .hosts
                    .hold(self.inner.store.as_ref(), &record.id)?;
                if matches!(holder, hosts::Holder::Elsewhere(_)) {
                    continue;
                }
            }
            let back = self.bring_back(&mut record, Gone::Restarted)?;
            if back.in_flight {
                in_flight.insert(record.id.clone());
            }
            if back.resume {
                resumed.insert(record.id);
            }
        }
        self.rebuild_watchers()?;
        self.inner.recovered.store(true, Ordering::Release);
        let queued = self.inner.store.queued_tasks()?;
        if shared {
            // Tasks with input waiting may be other hosts' to run: their runners find out.
            self.mark_crashed(in_flight.iter().chain(&resumed))?;
            resumed.extend(queued);
        } else {
            resumed.extend(queued);
            if crashed {
                self.mark_crashed(in_flight.iter().chain(&resumed))?;
            }
        }
        for id in &resumed {
            self.kick(id);
        }
        Ok(resumed.len())
    }

    /// Brings task `record` back after the host running its turn went down: see
    /// [`Engine::recover`]. Returns whether its turn was in flight and whether its runner
    /// must resume it.
    fn bring_back(&self, record: &mut TaskRecord, gone: Gone) -> Result<Back> {
        if record.crashed == Some(Crashed::Retried) && record.status() != Status::Terminated {
            self.end_after_crashes(record)?;
            return Ok(Back::default());
        }
        if !matches!(record.status(), Status::Running | Status::Waiting) {
            return Ok(Back::default());
        }
        if client_session_open(&self.events(&record.id, 0)?) {
            self.end_orphaned_session(record, gone)?;
            return Ok(Back::default());
        }
        let in_flight = record.status() == Status::Running;
        // Decided, and nothing of the call ran again yet (`resume` is cleared by a write
        // before it does): the runner resumes the turn.
        if record.status() == Status::Running && record.resume.is_some() && record.parent.is_none()
        {
            return Ok(Back {
                in_flight,
                resume: true,
            });
        }
        if let Some(pending) = self.review_to_keep(record) {
            let events = vec![(
                EventSource::Environment,
                EventKind::ConversationStateUpdateEvent {
                    key: "restart".into(),
                    value: json!({"message": gone.say("while the task waited in a review")}),
                },
            )];
            let deadline = self.review_deadline(&pending);
            if deadline.is_some_and(|d| d <= now_ms()) {
                self.decide_stored(record, pending, false, "timeout", events)?;
                return Ok(Back {
                    in_flight,
                    resume: true,
                });
            }
            self.records().save(record, events)?;
            lock(&self.inner.reviews).insert(pending.review_id.clone(), Waiter::Stored);
            if let Some(deadline) = deadline {
                self.time_out_review(record.id.clone(), pending.review_id, deadline);
            }
            return Ok(Back {
                in_flight,
                resume: false,
            });
        }
        let why = format!(
            "interrupted: {}; it was not re-run",
            gone.say("during this call")
        );
        let mut events = self.unanswered_calls(record, &why)?;
        record.status = Some(Status::Idle);
        record.pending_review = None;
        record.resume = None;
        events.push((
            EventSource::Environment,
            EventKind::ConversationStateUpdateEvent {
                key: "restart".into(),
                value: json!({"message": gone.say("during a turn")}),
            },
        ));
        events.push(task::status_event("idle"));
        self.records().save(record, events)?;
        Ok(Back {
            in_flight,
            resume: false,
        })
    }

    /// Records, durably, that a host runs on this store; returns whether one was running
    /// already, i.e. the last one went down without [`Engine::shutdown`].
    fn mark_running(&self) -> Result<bool> {
        let store = &self.inner.store;
        let was = store.state::<Value>(HOST_STATE, RUNNING_KEY)?.is_some();
        store.save_state_durably(HOST_STATE, RUNNING_KEY, &json!({"since": now_rfc3339()}))?;
        self.inner.marked_running.store(true, Ordering::SeqCst);
        Ok(was)
    }

    /// Marks `ids`, the tasks whose turn may have brought the host down, durably.
    fn mark_crashed<'a>(&self, ids: impl Iterator<Item = &'a String>) -> Result<()> {
        let mut marked = 0;
        for id in ids {
            let mut record = self.records().checkout(id)?;
            if record.crashed.is_none() && record.status() != Status::Terminated {
                record.crashed = Some(Crashed::Marked);
                self.records().save(&mut record, Vec::new())?;
                marked += 1;
            }
            self.records().checkin(record);
        }
        if marked > 0 {
            tracing::warn!(
                tasks = marked,
                "the host went down during their turns: a task whose next turn is running when \
                 it goes down again will be ended"
            );
            self.flush()?;
        }
        Ok(())
    }

    /// Ends task `record`, whose turn was running each of the last two times the host went
    /// down.
    fn end_after_crashes(&self, record: &mut TaskRecord) -> Result<()> {
        let mut events = self.unanswered_calls(
            record,
            "interrupted: the host went down during this call; it was not re-run",
        )?;
        record.crashed = None;
        record.pending_review = None;
        record.resume = None;
        turn::terminate(
            record,
            Reason::Error,
            None,
            "the host went down twice while a turn of this task ran; the task was ended so \
             that it cannot bring the host down again",
            &mut events,
        );
        tracing::error!(task.id = %record.id, "ended: the host went down twice during its turns");
        self.records().save(record, events)?;
        self.flush()?;
        Ok(())
    }

    /// Ends task `record`, a client session's (`Engine::open_session`), found in a turn or
    /// waiting in a review when its host went down: the session went with the host, so
    /// nobody waits for what the turn would answer, and a session's end ends its task (as
    /// [`Engine::close_session`] does). Its calls without an answer are answered as
    /// interrupted; its queued input is dropped. Resuming it instead would run the agent's
    /// LLM on the session's task, a turn nobody asked for.
    fn end_orphaned_session(&self, record: &mut TaskRecord, gone: Gone) -> Result<()> {
        self.clear_queue(&record.id)?;
        let why = format!(
            "interrupted: {}; its client's session ended with it",
            gone.say("during this call")
        );
        let mut events = self.unanswered_calls(record, &why)?;
        record.pending_review = None;
        record.resume = None;
        record.crashed = None;
        events.push(direct::session_event(
            json!({"closed": true, "reason": gone.say("during the session")}),
        ));
        delete(record, &mut events);
        tracing::info!(task.id = %record.id, "ended: its client's MCP session went down with the host");
        self.records().save(record, events)?;
        self.flush()?;
        Ok(())
    }

    /// The review `record` waits in, if it can wait across a restart: one of a call's
    /// `before_first` or `before` steps, in a task that no parent's call waits for (a parent's
    /// delegation is reported as interrupted at restart, so its child's turn ends too).
    fn review_to_keep(&self, record: &TaskRecord) -> Option<PendingReview> {
        if record.status() != Status::Waiting || record.parent.is_some() {
            return None;
        }
        record
            .pending_review
            .clone()
            .filter(|p| p.call_id.is_some())
    }

    /// Records the decision on `pending`, the review `record` waits in with no turn waiting for
    /// it (it was pending when the host restarted), after `events`; the task's runner then
    /// resumes the turn (`turn::resume`). Call holding the task's lock, or at start.
    fn decide_stored(
        &self,
        record: &mut TaskRecord,
        pending: PendingReview,
        approve: bool,
        decided_by: &str,
        mut events: Vec<(EventSource, EventKind)>,
    ) -> Result<()> {
        let Some(call_id) = pending.call_id else {
            return Err(EngineError::Conflict(format!(
                "review `{}` of task `{}` cannot resume its turn",
                pending.review_id, record.id
            )));
        };
        events.extend(review::decision_events(
            record,
            pending.review_id,
            approve,
            decided_by.to_owned(),
        ));
        record.resume = Some(Resume {
            call_id,
            triggered: pending.triggered,
        });
        self.records().save(record, events)
    }

    /// At `deadline_ms`, denies review `review_id` of task `task_id` as timed out, unless it
    /// was decided by then. The timer does not keep the engine alive.
    fn time_out_review(&self, task_id: String, review_id: String, deadline_ms: i64) {
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let wait = u64::try_from(deadline_ms.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let engine = Engine { inner };
            match engine
                .decide_review(&task_id, &review_id, false, Decider::Admin("timeout"))
                .await
            {
                // Not found: decided in time, or the task no longer waits.
                Ok(()) | Err(EngineError::NotFound(_)) => {}
                Err(e) => tracing::warn!(
                    task.id = %task_id,
                    "review `{review_id}` could not time out: {e}"
                ),
            }
        });
    }

    /// Ends a turn suspended with no runner (a review pending across a restart, or decided
    /// and not resumed yet): the review is dropped and every call without a result is answered
    /// with `why`. Returns those answers (none when there is no such turn). Call holding the
    /// task's lock: no turn of the task is running then.
    fn end_suspended_turn(
        &self,
        record: &mut TaskRecord,
        why: &str,
    ) -> Result<Vec<(EventSource, EventKind)>> {
        let pending = record.pending_review.take();
        let resume = record.resume.take();
        if pending.is_none() && resume.is_none() {
            return Ok(Vec::new());
        }
        if let Some(p) = pending {
            lock(&self.inner.reviews).remove(&p.review_id);
        }
        self.unanswered_calls(record, why)
    }

    /// An error result, `why`, for every call in `record`'s log that has none (they are all
    /// in the part of the log the LLM's view reaches).
    fn unanswered_calls(
        &self,
        record: &mut TaskRecord,
        why: &str,
    ) -> Result<Vec<(EventSource, EventKind)>> {
        self.records().log_view(record)?;
        Ok(unanswered_calls(record.journal.view(), why))
    }

    /// Keeps `watcher` in step with the task records from now on: it is given every stored
    /// record by [`Engine::recover`] (or now, when the engine has recovered already), after
    /// each reload, and each record as it is saved. Register watchers before `recover`: a
    /// record a resumed turn saves while a late watcher reads the store could reach it stale.
    pub fn watch(&self, watcher: Arc<dyn Watcher>) -> Result<()> {
        if self.inner.recovered.load(Ordering::Acquire) {
            let records = self.records().stored_records()?;
            watcher.rebuild(&self.plan(), &records);
        }
        self.inner
            .watchers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(watcher);
        Ok(())
    }

    /// Task records: reads through the cache, journals, writes.
    pub(crate) fn records(&self) -> &records::Records {
        &self.inner.records
    }

    /// Runs `tool` with the crate that provides it ([`Engine::provide_host_tools`]).
    pub fn provide_host_tools(&self, tools: Arc<dyn HostTools>) {
        *self
            .inner
            .host_tools
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tools);
    }

    /// Runs host tool `tool` for task `record`: its result, or the error the LLM is told.
    pub(crate) fn host_tool(
        &self,
        record: &TaskRecord,
        tool: HostTool,
        args: &Value,
    ) -> std::result::Result<Value, String> {
        let tools = self
            .inner
            .host_tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match tools {
            Some(tools) => tools.call(self, record, tool, args).map_err(|e| e.0),
            None => Err(format!(
                "`{}` is not available: this host runs no scheduler",
                tool.name()
            )),
        }
    }

    /// The registered watchers, read-locked while they are told (they never register one).
    fn watchers(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<dyn Watcher>>> {
        self.inner
            .watchers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells the watchers of `record`, just saved.
    pub(crate) fn tell_watchers(&self, record: &TaskRecord) {
        let watchers = self.watchers();
        if watchers.is_empty() {
            return;
        }
        let plan = self.plan();
        for w in watchers.iter() {
            w.saved(&plan, record);
        }
    }

    /// Gives the watchers every stored record (at start and after a reload).
    fn rebuild_watchers(&self) -> Result<()> {
        let watchers = self.watchers();
        if watchers.is_empty() {
            return Ok(());
        }
        let plan = self.plan();
        let records = self.records().stored_records()?;
        for w in watchers.iter() {
            w.rebuild(&plan, &records);
        }
        Ok(())
    }

    /// Removes the subscriptions of `tasks` that have expired by now (the tasks are otherwise
    /// untouched), with an event in each task's log. Tasks in a turn are left for later; a
    /// task with nothing expired is left as it is. Returns how many tasks lost subscriptions.
    pub async fn expire_subscriptions(&self, tasks: &[String]) -> Result<usize> {
        let now = now_ms();
        let mut n = 0;
        for id in tasks {
            let task_lock = self.task_lock(id);
            let Ok(_turn) = task_lock.try_lock() else {
                continue;
            };
            // The host that holds the task expires them.
            match self.inner.hosts.hold(self.inner.store.as_ref(), id)? {
                hosts::Holder::Elsewhere(_) => continue,
                hosts::Holder::Here { taken_over: true } => {
                    self.take_over(id)?;
                }
                hosts::Holder::Here { taken_over: false } => {}
            }
            let mut record = self.records().checkout(id)?;
            if let Some(event) =
                subscription::prune_expired(&mut record.subscriptions, record.last_activity_ms, now)
            {
                self.records().save(&mut record, vec![event])?;
                n += 1;
            }
            self.tell_watchers(&record);
            self.records().checkin(record);
        }
        Ok(n)
    }

    /// Takes a webhook delivery through the door: a repeat of a delivery id (read from the
    /// header its proof names) seen at its entrance within the dedupe window is
    /// [`Through::Duplicate`];
    /// otherwise `admit` decides what the delivery brings while another delivery with the
    /// same id waits here (one without an id is never a repeat), and what it admitted is
    /// accepted. See [`door`](crate#modules).
    pub async fn arrive<T, E: From<EngineError>>(
        &self,
        delivered: Delivered<'_>,
        admit: impl AsyncFnOnce(&Arrival<'_>) -> std::result::Result<Admitted<T>, E>,
    ) -> std::result::Result<Through<T>, E> {
        self.inner.door.through(self, delivered, admit).await
    }

    /// Whether task `task` takes tool event `event` of `tool` that routing matched to it
    /// (`event_json`: the CEL variable `event`, from [`Arrival::event`]): its event filter
    /// component, then its capability's middleware with `event` in scope. Changes nothing in
    /// the task: a step that asks that it be locked says so ([`Admission::Lock`]; see
    /// [`Engine::lock_task`]).
    pub async fn admit_event(
        &self,
        tool: &ToolPlan,
        event: &EventPlan,
        task: &str,
        event_json: &agentmesh_expr::Bound,
    ) -> Result<Admission> {
        admission::admit(self, tool, event, task, event_json).await
    }

    fn task_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.inner.locks);
        Arc::clone(locks.entry(id.to_owned()).or_default())
    }

    /// Task `id`'s lock, and where its turns run (see [`hosts`]): a task this host just took
    /// over from one that went quiet mid-turn is brought back first, as after a restart.
    async fn hold_task(
        &self,
        id: &str,
    ) -> Result<(tokio::sync::OwnedMutexGuard<()>, hosts::Holder)> {
        let turn = self.task_lock(id).lock_owned().await;
        let holder = self.inner.hosts.hold(self.inner.store.as_ref(), id)?;
        if holder == (hosts::Holder::Here { taken_over: true }) {
            self.take_over(id)?;
        }
        Ok((turn, holder))
    }

    /// Brings task `id` back, its lease just taken from a host that went quiet during its turn,
    /// as [`Engine::recover`] brings a task back after a restart: the host went down during
    /// its turn. Call holding the task's lock.
    fn take_over(&self, id: &str) -> Result<()> {
        self.records().forget(id);
        let mut record = match self.records().checkout(id) {
            // Input queued before its task had a record: its runner makes it.
            Err(EngineError::NotFound(_)) => return Ok(()),
            checked_out => checked_out?,
        };
        let back = self.bring_back(&mut record, Gone::TakenOver)?;
        if (back.in_flight || back.resume)
            && record.crashed.is_none()
            && record.status() != Status::Terminated
        {
            record.crashed = Some(Crashed::Marked);
            self.records().save(&mut record, Vec::new())?;
            self.flush()?;
        }
        self.tell_watchers(&record);
        self.records().checkin(record);
        if back.resume {
            self.kick(id);
        }
        Ok(())
    }

    /// The host that runs task `id`'s turns when it is another live host sharing the store;
    /// `None` when it is this one (which takes the task's lease when no live host holds it).
    pub async fn holder(&self, id: &str) -> Result<Option<String>> {
        let (_turn, holder) = self.hold_task(id).await?;
        Ok(match holder {
            hosts::Holder::Elsewhere(host) => Some(host),
            hosts::Holder::Here { .. } => None,
        })
    }

    /// Drops task `id`'s queued input (buffered: durable with the next flush); returns how
    /// many inputs were dropped.
    pub(crate) fn clear_queue(&self, id: &str) -> Result<usize> {
        let dropped = self.inner.store.clear_queue_buffered(id)?;
        self.records().forget_queue(id);
        Ok(dropped)
    }

    /// Forgets what this host knew of task `id` (another host took it over).
    fn forget_task(&self, id: &str) {
        self.inner.hosts.forget(id);
        self.records().forget(id);
    }

    /// Asks host `host`, which holds the task, to do `request`.
    async fn ask(&self, host: &str, request: hosts::Request) -> Result<()> {
        self.inner
            .hosts
            .ask(self.inner.store.as_ref(), host, request)
            .await
    }

    /// Serves this host's part among the hosts sharing the store, for ever (abort the task to
    /// stop it); nothing to do on a store of one host. It renews this host's lease every third
    /// of it; runs what the others ask of it (a task's queued input, an interrupt, a deletion,
    /// a review decision); reads the tasks they wrote again for the watchers; and takes over
    /// the tasks whose holder went quiet mid-turn or with input waiting.
    pub async fn serve_hosts(&self, lease: Duration) {
        let Some(mut heard) = self.inner.hosts.heard() else {
            return;
        };
        if !self.inner.store.shared() {
            return;
        }
        let mut renew = tokio::time::interval(lease / 3);
        let mut sweep = tokio::time::interval(hosts::SWEEP_EVERY);
        let mut refresh = tokio::time::interval(hosts::REFRESH_EVERY);
        let mut written: HashSet<String> = HashSet::new();
        loop {
            tokio::select! {
                _ = renew.tick() => {
                    if let Err(e) = self.inner.store.renew_host() {
                        tracing::warn!("renewing this host's lease failed: {e}");
                    }
                }
                _ = sweep.tick() => match self.inner.store.orphaned_tasks(hosts::SWEEP_BATCH) {
                    Ok(tasks) => {
                        for id in tasks {
                            self.kick(&id);
                        }
                    }
                    Err(e) => tracing::warn!("looking for tasks to take over failed: {e}"),
                },
                _ = refresh.tick(), if !written.is_empty() => {
                    for id in std::mem::take(&mut written) {
                        if let Ok(record) = self.records().stored_record(&id) {
                            self.tell_watchers(&record);
                        }
                    }
                }
                heard = heard.recv() => {
                    let Some(heard) = heard else {
                        return;
                    };
                    self.on_heard(heard, &mut written);
                }
            }
        }
    }

    /// Acts on what another host said (see [`Engine::serve_hosts`]).
    fn on_heard(&self, heard: hosts::Heard, written: &mut HashSet<String>) {
        match heard {
            hosts::Heard::Written(id) => {
                self.forget_task(&id);
                written.insert(id);
            }
            hosts::Heard::Kick(id) => self.kick(&id),
            hosts::Heard::Asked { from, n, request } => {
                let engine = self.clone();
                tokio::spawn(async move {
                    let done = match &request {
                        hosts::Request::Interrupt { task } => engine.interrupt(task).await,
                        // The asking host ends the task's children itself.
                        hosts::Request::Delete { task } => engine.end_task(task, None).await,
                        hosts::Request::Lock { task, reason } => {
                            engine.lock_task(task, reason).await
                        }
                        hosts::Request::Decide {
                            task,
                            review,
                            approve,
                            admin,
                            subject,
                        } => {
                            let decider = if *admin {
                                Decider::Admin(subject)
                            } else {
                                Decider::Subject(subject)
                            };
                            engine.decide_review(task, review, *approve, decider).await
                        }
                    };
                    let reply = hosts::Reply::of(&done);
                    engine
                        .inner
                        .hosts
                        .reply(engine.inner.store.as_ref(), &from, n, &reply);
                });
            }
            hosts::Heard::Replied { n, reply } => self.inner.hosts.replied(n, reply),
            hosts::Heard::Missed => {
                self.inner.hosts.missed();
                self.records().forget_all();
                if let Err(e) = self.rebuild_watchers() {
                    tracing::warn!("reading every task again failed: {e}");
                }
            }
        }
    }

    /// Calls `hook` whenever this host may have missed other hosts' writes on a shared store
    /// (its session listening for them was lost, and is open again): whoever keeps what the
    /// store's append hook tells must read the store again. The engine forgets its cached
    /// records then.
    pub fn on_missed_writes(&self, hook: MissedHook) {
        self.inner.hosts.on_missed(hook);
    }

    /// Answers a review: resumes a task waiting in `review()`. Only the reviewer the review
    /// names, or an admin, decides; the decision is recorded as `decider`'s subject. A review
    /// pending when the host restarted (see [`Engine::recover`]) is answered too: the decision
    /// is recorded and the task's runner resumes the turn, running the call that waited from
    /// its start (its reviews answered by the decisions recorded for it). Either way it answers
    /// once the decision is in the task's log and on disk. `NotFound`: the task
    /// does not wait for this review (unknown, decided already, or the task went on);
    /// `Forbidden`: `decider` may not decide it; `Conflict`: the turn that waited is gone.
    pub async fn decide_review(
        &self,
        task_id: &str,
        review_id: &str,
        approve: bool,
        decider: Decider<'_>,
    ) -> Result<()> {
        let pending = self.records().peek(task_id, |r| {
            r.pending_review
                .as_ref()
                .filter(|r| r.review_id == review_id)
                .map(|r| (r.may_decide(&decider), r.reviewer.clone()))
        })?;
        let not_found =
            || EngineError::NotFound(format!("review `{review_id}` of task `{task_id}`"));
        match pending {
            None => return Err(not_found()),
            Some((false, reviewer)) => {
                return Err(EngineError::Forbidden(format!(
                    "review `{review_id}` is for `{reviewer}` (or an admin) to decide, not `{}`",
                    decider.subject()
                )));
            }
            Some((true, _)) => {}
        }
        let user = decider.subject();
        let waiter = lock(&self.inner.reviews).remove(review_id);
        match waiter {
            Some(Waiter::Turn(s)) => {
                let gone = || {
                    EngineError::Conflict(format!("review `{review_id}` is no longer waited for"))
                };
                let (recorded, written) = tokio::sync::oneshot::channel();
                let decision = review::ReviewDecision {
                    approve,
                    user: user.to_owned(),
                    recorded,
                };
                s.send(decision).map_err(|_| gone())?;
                // Answered once the turn has the decision in the log and on disk.
                written.await.unwrap_or_else(|_| Err(gone()))
            }
            Some(Waiter::Stored) => {
                let decided = self
                    .decide_after_restart(task_id, review_id, (approve, user))
                    .await;
                if matches!(decided, Err(EngineError::Store(_))) {
                    // Nothing was recorded: the review still waits.
                    lock(&self.inner.reviews).insert(review_id.to_owned(), Waiter::Stored);
                }
                decided
            }
            None if self.inner.store.shared() => {
                // Waited for on the host that holds the task, or (taken over from a host that
                // went quiet) here now.
                let (turn, holder) = self.hold_task(task_id).await?;
                drop(turn);
                match holder {
                    hosts::Holder::Elsewhere(host) => {
                        let request = hosts::Request::Decide {
                            task: task_id.to_owned(),
                            review: review_id.to_owned(),
                            approve,
                            admin: matches!(decider, Decider::Admin(_)),
                            subject: user.to_owned(),
                        };
                        self.ask(&host, request).await
                    }
                    hosts::Holder::Here { .. } => {
                        let stored = lock(&self.inner.reviews).remove(review_id);
                        match stored {
                            Some(Waiter::Stored) => {
                                self.decide_after_restart(task_id, review_id, (approve, user))
                                    .await
                            }
                            Some(waiter) => {
                                lock(&self.inner.reviews).insert(review_id.to_owned(), waiter);
                                Err(not_found())
                            }
                            None => Err(not_found()),
                        }
                    }
                }
            }
            None => Err(not_found()),
        }
    }

    /// Decides review `review_id` of task `task_id`, pending since before a restart, as
    /// `(approve, user)`, and starts the task's runner to resume the turn.
    async fn decide_after_restart(
        &self,
        task_id: &str,
        review_id: &str,
        (approve, user): (bool, &str),
    ) -> Result<()> {
        let (turn, holder) = self.hold_task(task_id).await?;
        if let hosts::Holder::Elsewhere(host) = holder {
            return Err(EngineError::Conflict(format!(
                "review `{review_id}`: task `{task_id}` went on to host `{host}`"
            )));
        }
        let mut record = self.records().checkout(task_id)?;
        let pending = record
            .pending_review
            .clone()
            .filter(|p| p.review_id == review_id && record.status() == Status::Waiting);
        let Some(pending) = pending else {
            self.records().checkin(record);
            return Err(EngineError::NotFound(format!(
                "review `{review_id}` of task `{task_id}`"
            )));
        };
        self.decide_stored(&mut record, pending, approve, user, Vec::new())?;
        // Durable before the decision is acknowledged.
        let flushed = self.flush();
        self.records().checkin(record);
        drop(turn);
        self.kick(task_id);
        Ok(flushed?)
    }
}

/// How a task's host went (see [`Engine::bring_back`]).
#[derive(Debug, Clone, Copy)]
enum Gone {
    /// This host went down and started again.
    Restarted,
    /// Another host sharing the store went quiet, and this one took the task over.
    TakenOver,
}

impl Gone {
    /// What happened, `when` (e.g. "during a turn"), as the task's log says it.
    fn say(self, when: &str) -> String {
        match self {
            Gone::Restarted => format!("the host restarted {when}"),
            Gone::TakenOver => {
                format!("the host running the task went down {when}, and another took it over")
            }
        }
    }
}

/// What [`Engine::bring_back`] did.
#[derive(Debug, Default, Clone, Copy)]
struct Back {
    /// The task's turn was running when its host went down.
    in_flight: bool,
    /// Its runner must resume the turn.
    resume: bool,
}

/// What a task's runner does next.
// One lives on the stack for a turn's start; boxing the input would add an allocation per turn.
#[allow(clippy::large_enum_variant)]
enum Work {
    /// A turn for this queued input.
    Input(QueuedInput),
    /// The rest of a turn suspended across a restart, whose review was decided.
    Resume(Resume),
}

/// Ends `record` as deleted, with the events that say so after `events`: its subscriptions
/// removed, and its status `terminated` (reason `deleted`). A task that ended already keeps
/// its reason, and a second deletion adds nothing to its log but the subscriptions it still
/// had.
fn delete(record: &mut TaskRecord, events: &mut Vec<(EventSource, EventKind)>) {
    let ended = record.status() == Status::Terminated;
    if !ended || !record.subscriptions.is_empty() {
        events.push((
            EventSource::Environment,
            EventKind::ConversationStateUpdateEvent {
                key: "subscriptions_removed".into(),
                value: json!({"reason": "deleted"}),
            },
        ));
    }
    if !ended {
        record.status = Some(Status::Terminated);
        record.reason = Some(Reason::Deleted);
        events.push(task::status_event("terminated"));
    }
    record.subscriptions.clear();
}

/// Whether `log` shows a client session opened and not closed (`Engine::open_session`).
fn client_session_open(log: &[Event]) -> bool {
    let mut open = false;
    for event in log {
        if let EventKind::ConversationStateUpdateEvent { key, value } = &event.kind
            && key == "client_session"
        {
            open = value["opened"] == true && value["closed"] != true;
        }
    }
    open
}

/// An error result, `why`, for every call in `log` that has none.
fn unanswered_calls(log: &[Event], why: &str) -> Vec<(EventSource, EventKind)> {
    let mut open: Vec<(String, String)> = Vec::new();
    for event in log {
        if let EventKind::ActionEvent { tool_call, .. } = &event.kind {
            open.push((tool_call.id.clone(), tool_call.name.clone()));
        } else if let Some(answered) = event.kind.answered_call() {
            open.retain(|(id, _)| id != answered);
        }
    }
    open.into_iter()
        .map(|(id, name)| {
            (
                EventSource::Environment,
                EventKind::AgentErrorEvent {
                    tool_call_id: Some(id),
                    tool_name: Some(name),
                    error: why.to_owned(),
                },
            )
        })
        .collect()
}

/// Checks input against the agent's parameters: `message` required unless defaulted (a bare
/// string becomes one text part), unknown keys refused, defaults filled, required present.
/// The input is moved into the result, not copied: a request's is the tree its body parsed
/// into, the one its charge covers.
pub fn normalize_input(agent: &AgentPlan, input: Value) -> Result<Value> {
    checked_input(agent, input, true)
}

/// [`normalize_input`] for a trigger's input, which may have no `message` (trigger.md: a
/// trigger without one creates its task with no initial message).
pub fn normalize_trigger_input(agent: &AgentPlan, input: Value) -> Result<Value> {
    checked_input(agent, input, false)
}

fn checked_input(agent: &AgentPlan, input: Value, needs_message: bool) -> Result<Value> {
    let mut io = match input {
        Value::Object(m) => m,
        Value::String(s) => {
            let mut m = Map::new();
            m.insert("message".into(), Value::String(s));
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
    let input = Value::Object(io);
    agent
        .input_schema
        .check(&input, "parameter")
        .map_err(EngineError::Input)?;
    let Value::Object(mut io) = input else {
        return Err(EngineError::Input("input must be an object".into()));
    };
    if !needs_message && !io.contains_key("message") {
        return Ok(Value::Object(io));
    }
    let message = io.remove("message").ok_or_else(|| {
        EngineError::Input("missing `message` (and the agent declares no default)".into())
    })?;
    io.insert("message".into(), message_parts(message)?);
    Ok(Value::Object(io))
}

/// A message as content parts: a string becomes one text part.
fn message_parts(message: Value) -> Result<Value> {
    match message {
        Value::String(s) => Ok(json!([ContentPart::text(s)])),
        Value::Array(parts) => {
            for p in &parts {
                if ContentPart::deserialize(p).is_err() {
                    return Err(EngineError::Input(
                        "`message` parts must be `{\"mimeType\": …, \"text\": …}`".into(),
                    ));
                }
            }
            Ok(Value::Array(parts))
        }
        _ => Err(EngineError::Input(
            "`message` must be a string or a list of content parts".into(),
        )),
    }
}

/// A parent's call waiting for its child's turn (see [`Engine::delegating`]); dropped, the
/// child is on its own again.
pub(crate) struct Delegation<'e> {
    engine: &'e Engine,
    child: String,
}

impl Drop for Delegation<'_> {
    fn drop(&mut self) {
        lock(&self.engine.inner.delegations).remove(&self.child);
    }
}

/// A request that a task's running turn stop (see [`Engine::interrupt`]); dropped, it is
/// withdrawn, so a caller that gives up while it waits (its connection closed) leaves no
/// request behind that would stop every later turn.
pub(crate) struct StopRequest<'e> {
    engine: &'e Engine,
    id: String,
    /// Made by [`Engine::cancel_call`].
    cancel: bool,
}

/// Who asks a task to stop: how many [`StopRequest`]s, and how many of them are its client's
/// cancel of the call running in it ([`Engine::cancel_call`]).
#[derive(Default)]
struct Stops {
    asked: usize,
    cancels: usize,
}

impl Drop for StopRequest<'_> {
    fn drop(&mut self) {
        let mut all = lock(&self.engine.inner.interrupts);
        if let Some(stops) = all.get_mut(&self.id) {
            stops.asked -= 1;
            stops.cancels -= usize::from(self.cancel);
            if stops.asked == 0 {
                all.remove(&self.id);
            }
        }
    }
}
