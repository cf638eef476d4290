//! The task record the store keeps, and the context object built from it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use agentmesh_expr::Needs;
use agentmesh_model::event::{EventKind, EventSource};

use crate::plan::AgentPlan;
pub use crate::subscription::Subscription;

/// Epoch ms as RFC 3339 (UTC, milliseconds).
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A task's run state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for input.
    Idle,
    /// A turn is in progress.
    Running,
    /// Suspended in `review()`.
    Waiting,
    /// Ended for good.
    Terminated,
}

/// Why a task terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A limit was exceeded.
    LimitExceeded,
    /// An unrecoverable error.
    Error,
    /// A middleware or guardrail `lock_task`.
    Locked,
    /// Deleted through the API.
    Deleted,
}

/// Who a task runs for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRef {
    /// Implementation-specific id, e.g. `user:alice@example.com`.
    pub id: String,
    /// Email, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// Per-function statistics, as `context.capabilities.<fn>` shows them. Lists are newest
/// first, so `outputs[0]` is the latest output (deques: a call is added at the front).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapStats {
    /// Calls that succeeded.
    pub count_successful: u64,
    /// Calls that failed.
    pub count_errored: u64,
    /// Calls middleware refused.
    pub count_restricted: u64,
    /// When each call happened.
    pub timestamps: VecDeque<String>,
    /// The resolved input of each call.
    pub inputs: VecDeque<Value>,
    /// The output of each call (before `after` transforms).
    pub outputs: VecDeque<Value>,
    /// Whether each call succeeded.
    pub successful: VecDeque<bool>,
    /// Whether each call failed.
    pub errored: VecDeque<bool>,
    /// Whether each call was refused.
    pub restricted: VecDeque<bool>,
    /// Child tasks, for delegations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_ids: Option<VecDeque<String>>,
}

/// How a call ended, for the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded.
    Successful,
    /// It failed.
    Errored,
    /// Middleware refused it.
    Restricted,
}

impl CapStats {
    /// As in the context: the fields `needs` names (the counts cost nothing; the per-call
    /// lists are copied only when read).
    pub(crate) fn to_json(&self, needs: &Needs) -> Value {
        if needs.is_all() {
            return serde_json::to_value(self).unwrap_or(Value::Null);
        }
        let mut out = Map::new();
        let mut put = |field: &str, value: &dyn Fn() -> Value| {
            if needs.field(field).is_some() {
                out.insert(field.to_owned(), value());
            }
        };
        put("count_successful", &|| json!(self.count_successful));
        put("count_errored", &|| json!(self.count_errored));
        put("count_restricted", &|| json!(self.count_restricted));
        put("timestamps", &|| json!(self.timestamps));
        put("inputs", &|| json!(self.inputs));
        put("outputs", &|| json!(self.outputs));
        put("successful", &|| json!(self.successful));
        put("errored", &|| json!(self.errored));
        put("restricted", &|| json!(self.restricted));
        if let Some(ids) = &self.task_ids {
            put("task_ids", &|| json!(ids));
        }
        Value::Object(out)
    }

    /// Records one call, newest first.
    pub fn record(&mut self, outcome: Outcome, input: Value, output: Value, child: Option<&str>) {
        match outcome {
            Outcome::Successful => self.count_successful += 1,
            Outcome::Errored => self.count_errored += 1,
            Outcome::Restricted => self.count_restricted += 1,
        }
        self.timestamps.push_front(agentmesh_store::now_rfc3339());
        self.inputs.push_front(input);
        self.outputs.push_front(output);
        self.successful.push_front(outcome == Outcome::Successful);
        self.errored.push_front(outcome == Outcome::Errored);
        self.restricted.push_front(outcome == Outcome::Restricted);
        if let Some(id) = child {
            self.task_ids
                .get_or_insert_with(VecDeque::new)
                .push_front(id.to_owned());
        }
    }
}

/// A review `review(user)` is waiting for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReview {
    /// The id to answer with.
    pub review_id: String,
    /// Who must decide.
    pub reviewer: String,
    /// The capability call whose `before_first` or `before` steps asked: a review that can
    /// wait across a restart (the call runs again once it is decided). `None` for a review in
    /// a guardrail or an `after` step, which a restart ends.
    #[serde(default)]
    pub call_id: Option<String>,
    /// When it was requested, epoch ms: its timeout counts from here.
    #[serde(default)]
    pub requested_ms: i64,
    /// Whether the turn is a triggered one (its timeout is at most
    /// [`TRIGGERED_REVIEW_TIMEOUT`](crate::TRIGGERED_REVIEW_TIMEOUT)).
    #[serde(default)]
    pub triggered: bool,
    /// The step that asks: `{"action", "phase", "expression"}` (null in records written
    /// before the host kept it).
    #[serde(default)]
    pub step: Value,
    /// What is under review: `{"input"}`, and `{"output"}` after a call.
    #[serde(default)]
    pub subject: Value,
}

impl PendingReview {
    /// Whether `decider` may decide this review: an admin, or the reviewer it names.
    pub fn may_decide(&self, decider: &Decider<'_>) -> bool {
        decider.may_decide_for(&self.reviewer)
    }
}

/// A review waiting for a decision, with its task.
#[derive(Debug, Clone)]
pub struct WaitingReview {
    /// The task that waits.
    pub task_id: String,
    /// Its agent, `namespace/name`.
    pub agent: String,
    /// The review.
    pub review: PendingReview,
}

/// Who decides a review, authenticated by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider<'a> {
    /// An admin (or the host itself): any review, recorded as decided by this subject.
    Admin(&'a str),
    /// Only the reviews that name this subject.
    Subject(&'a str),
}

impl Decider<'_> {
    /// Whether this decider may decide a review that names `reviewer`: an admin, or that
    /// reviewer.
    pub fn may_decide_for(&self, reviewer: &str) -> bool {
        match self {
            Decider::Admin(_) => true,
            Decider::Subject(s) => *s == reviewer,
        }
    }

    /// The subject recorded as `decided_by`.
    pub fn subject(&self) -> &str {
        match self {
            Decider::Admin(s) | Decider::Subject(s) => s,
        }
    }
}

/// Where a task stands after the host went down during its turn: a task whose turn is
/// running when the host goes down a second time is ended, so that no turn can bring the host
/// down over and over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Crashed {
    /// Marked at the restart; no turn of it has started since.
    Marked,
    /// A turn started after the restart (written durably before it ran) and has not ended.
    Retried,
}

/// A turn to resume: the review its call waited in across a restart was decided, and the call
/// runs again from its start (see [`Engine::decide_review`](crate::Engine::decide_review)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    /// The call that waited.
    pub call_id: String,
    /// Whether the turn is a triggered one.
    pub triggered: bool,
}

/// Everything the host keeps about a task besides its log and queue.
///
/// What only grows with the task (`history`, `inputs`, `outputs`, `capabilities`,
/// `invocations`) is left out of the record's JSON: each write stores what it added as one of
/// the record's parts (see `records.rs`), so a write costs what changed, not the task's
/// length. Records written before parts existed hold it in the JSON and read as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskRecord {
    /// `t_…`.
    pub id: String,
    /// `namespace/name`.
    pub agent: String,
    /// Who the task runs for.
    pub user: UserRef,
    /// The run state.
    pub status: Option<Status>,
    /// Why it terminated.
    pub reason: Option<Reason>,
    /// The limit that terminated it, for `limit_exceeded`.
    pub limit: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// Epoch ms.
    pub created_ms: i64,
    /// The delegating task, for child tasks.
    pub parent: Option<String>,
    /// Delegation depth (0 for top-level tasks).
    pub depth: u32,
    /// LLM calls made.
    pub llm_calls: u64,
    /// Prompt tokens used.
    pub prompt_tokens: u64,
    /// Completion tokens used.
    pub completion_tokens: u64,
    /// Capability invocations (delegations included).
    pub tool_calls: u64,
    /// Turn types in order: `input`, `llm`, `capability`.
    #[serde(skip_serializing)]
    pub history: Vec<String>,
    /// Inputs (TaskIO), oldest first.
    #[serde(skip_serializing)]
    pub inputs: Vec<Value>,
    /// Outputs (TaskIO), oldest first.
    #[serde(skip_serializing)]
    pub outputs: Vec<Value>,
    /// Per-function statistics.
    #[serde(skip_serializing)]
    pub capabilities: IndexMap<String, CapStats>,
    /// Function names, one per invocation, in order.
    #[serde(skip_serializing)]
    pub invocations: Vec<String>,
    /// Delegations made.
    pub delegation_count: u64,
    /// Capability keys whose `before_first` ran.
    pub before_first_done: BTreeSet<String>,
    /// Allow lists: tool → parameter → values. Stored in parts, as values are added.
    #[serde(skip_serializing)]
    pub allow_lists: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Allow-list values added since the record was last written: (tool, parameter, value).
    #[serde(skip)]
    pub(crate) allow_added: Vec<(String, String, String)>,
    /// Sealed parameter names per tool (bound at task start).
    pub sealed: BTreeMap<String, BTreeSet<String>>,
    /// The latest `exposes` values.
    pub exposes: Map<String, Value>,
    /// Whether the system prompt was logged.
    pub prompt_logged: bool,
    /// The `seq` of the system prompt's event (0: not known, for records older than it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prompt_seq: u64,
    /// The end of the last range condensation forgot (0: none): the LLM's view of the log is
    /// the system prompt and the events after it, so a turn reads no further back.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub condensed_to: u64,
    /// The review the task waits for.
    pub pending_review: Option<PendingReview>,
    /// A turn suspended across a restart whose review was decided: the task's runner resumes
    /// it before taking new input.
    pub resume: Option<Resume>,
    /// The task had a turn running (or input waiting) when the host went down without
    /// shutting down; cleared once a turn of it ends. See [`Engine::recover`](crate::Engine::recover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashed: Option<Crashed>,
    /// Epoch ms of the last processing step.
    pub last_activity_ms: i64,
    /// Event subscriptions (expired ones are removed).
    pub subscriptions: Vec<Subscription>,
    /// Interrupted: the subscriptions are suspended until the task takes new input.
    pub interrupted: bool,
    /// What the running turn has done but not written yet.
    #[serde(skip)]
    pub(crate) journal: crate::journal::Journal,
    /// How much of the growing fields the stored parts hold.
    #[serde(skip)]
    pub(crate) stored: crate::journal::Stored,
}

impl TaskRecord {
    /// Why the task is past `agent`'s `max_age`, if it is.
    pub(crate) fn past_max_age(&self, agent: &AgentPlan) -> Option<String> {
        let max = agent.limits.max_age?;
        let age = agentmesh_store::now_ms().saturating_sub(self.created_ms);
        (age as u128 > max.0.as_millis()).then(|| format!("the task is older than {max}"))
    }

    /// Adds `value` to `tool`'s allow list for `param` (an empty list is made if needed).
    pub(crate) fn allow(&mut self, tool: &str, param: &str, value: Option<String>) {
        let list = allow_list(&mut self.allow_lists, tool, param);
        if let Some(value) = value
            && list.insert(value.clone())
        {
            self.allow_added
                .push((tool.to_owned(), param.to_owned(), value));
        }
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.status.unwrap_or(Status::Idle)
    }

    /// The text of the last output.
    pub fn last_output_text(&self) -> Option<String> {
        let last = self.outputs.last()?;
        let parts = last.get("message")?.as_array()?;
        Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }

    /// The context object (task-context seed) for CEL.
    pub fn context(&self, agent: &AgentPlan) -> Value {
        self.context_for(agent, &Needs::All)
    }

    /// The parts of the context object that `needs` names (the others are left out: the
    /// context is converted for every evaluation that reads it, and most read a few fields).
    pub fn context_for(&self, agent: &AgentPlan, needs: &Needs) -> Value {
        let mut out = Map::new();
        let wanted = |f: &str| needs.field(f).is_some();
        if wanted("agent") {
            out.insert(
                "agent".into(),
                json!({"name": agent.name, "namespace": agent.namespace, "started_at": self.created_at}),
            );
        }
        if wanted("user") {
            out.insert(
                "user".into(),
                json!({"id": self.user.id, "email": self.user.email}),
            );
        }
        if wanted("llm") {
            out.insert(
                "llm".into(),
                json!({
                    "model": agent.model,
                    "tokens": {
                        "total": self.prompt_tokens + self.completion_tokens,
                        "prompt": self.prompt_tokens,
                        "completion": self.completion_tokens,
                    },
                }),
            );
        }
        if wanted("_history") {
            out.insert(
                "_history".into(),
                json!({"turns": self.history, "turn_count": self.history.len()}),
            );
        }
        if wanted("input") {
            out.insert("input".into(), json!(self.inputs));
        }
        if wanted("output") {
            out.insert("output".into(), json!(self.outputs));
        }
        for key in ["capabilities", "cap"] {
            if let Some(parts) = needs.field(key) {
                out.insert(key.into(), self.capabilities_for(agent, parts));
            }
        }
        Value::Object(out)
    }

    /// `context.capabilities`: `_meta`, an entry per function (zero counts before its first
    /// call) and an aggregate per multi-action tool; only the parts in `needs`.
    fn capabilities_for(&self, agent: &AgentPlan, needs: &Needs) -> Value {
        let want = |k: &str| needs.field(k).is_some();
        let mut caps = Map::new();
        if want("_meta") {
            caps.insert(
                "_meta".into(),
                json!({
                    "invocations": self.invocations,
                    "count": self.invocations.len(),
                    "delegation_count": self.delegation_count,
                }),
            );
        }
        let none = CapStats::default();
        for f in &agent.functions {
            if let Some(parts) = needs.field(&f.name) {
                let stats = self.capabilities.get(&f.name).unwrap_or(&none);
                caps.insert(f.name.clone(), stats.to_json(parts));
            }
        }
        // Tools that `invoke` steps call without being capabilities of the agent.
        for (name, stats) in &self.capabilities {
            if !caps.contains_key(name)
                && let Some(parts) = needs.field(name)
            {
                caps.insert(name.clone(), stats.to_json(parts));
            }
        }
        for (key, names) in agent.aggregates.iter().filter(|(k, _)| want(k)) {
            caps.insert(
                key.clone(),
                aggregate(names.iter().filter_map(|n| self.capabilities.get(n))),
            );
        }
        Value::Object(caps)
    }

    /// The subscriptions in force: none while interrupted or terminated.
    pub fn active_subscriptions(&self) -> &[Subscription] {
        if self.interrupted || self.status() == Status::Terminated {
            &[]
        } else {
            &self.subscriptions
        }
    }
}

/// The aggregate entry of a tool with several actions: counts summed, lists merged newest
/// first.
fn aggregate<'a>(stats: impl Iterator<Item = &'a CapStats>) -> Value {
    let mut calls: Vec<(String, Value, Value, bool, bool, bool)> = Vec::new();
    let mut total = CapStats::default();
    for s in stats {
        total.count_successful += s.count_successful;
        total.count_errored += s.count_errored;
        total.count_restricted += s.count_restricted;
        for i in 0..s.timestamps.len() {
            calls.push((
                s.timestamps[i].clone(),
                s.inputs.get(i).cloned().unwrap_or(Value::Null),
                s.outputs.get(i).cloned().unwrap_or(Value::Null),
                s.successful.get(i).copied().unwrap_or(false),
                s.errored.get(i).copied().unwrap_or(false),
                s.restricted.get(i).copied().unwrap_or(false),
            ));
        }
    }
    calls.sort_by(|a, b| b.0.cmp(&a.0));
    for (t, i, o, s, e, r) in calls {
        total.timestamps.push_back(t);
        total.inputs.push_back(i);
        total.outputs.push_back(o);
        total.successful.push_back(s);
        total.errored.push_back(e);
        total.restricted.push_back(r);
    }
    serde_json::to_value(total).unwrap_or(Value::Null)
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `tool`'s allow list for `param` in `lists`, made empty if it is not there.
pub(crate) fn allow_list<'a>(
    lists: &'a mut BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    tool: &str,
    param: &str,
) -> &'a mut BTreeSet<String> {
    lists
        .entry(tool.to_owned())
        .or_default()
        .entry(param.to_owned())
        .or_default()
}

/// A `status` state update.
pub(crate) fn status_event(status: &str) -> (EventSource, EventKind) {
    (
        EventSource::Environment,
        EventKind::ConversationStateUpdateEvent {
            key: "status".into(),
            value: json!(status),
        },
    )
}
