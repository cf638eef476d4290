//! `kind: commonagents.info/v1beta2/agent`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Duration, MiddlewareStep, ParameterSchema};

/// An agent: a system prompt, a model and the capabilities the LLM may use.
/// ```yaml
/// kind: commonagents.info/v1beta2/agent
/// namespace: engineering
/// name: coder-agent
/// description: An autonomous software engineer.
/// prompt: You are helping {context.user.email}.
/// capabilities:
///   github-pr:
///     bindings: {owner: "'buoyant-systems'", repo: "'agent-mesh'"}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// `commonagents.info/v1beta2/agent`.
    pub kind: String,
    /// The namespace the agent belongs to.
    pub namespace: String,
    /// Unique within the namespace.
    pub name: String,
    /// What the agent is for.
    pub description: String,
    /// The system prompt, a `{…}` template over `context`, `runtime` and `now`.
    pub prompt: String,
    /// `<provider>/<model>`, e.g. `openai/gpt-4o` or `scripted/scripts/demo.yaml`; the host's
    /// `default_model` when absent.
    pub model: Option<String>,
    /// Scheduling priority of the agent's tasks.
    pub priority: Option<i64>,
    /// Access to the workspace mount.
    #[serde(default)]
    pub mount: MountScope,
    /// Resource limits of each task.
    pub limits: Option<Limits>,
    /// The structured input the agent accepts (`message` is always accepted).
    pub parameters: Option<ParameterSchema>,
    /// Tools and agents the LLM may use, keyed by reference.
    #[serde(default)]
    pub capabilities: IndexMap<String, CapabilityDecl>,
    /// Provider built-in tools: `web-search`, `image-generation`, …
    pub model_capabilities: Option<Vec<String>>,
    /// Steps at the agent's input/output boundary.
    pub guardrails: Option<Guardrails>,
    /// Keys added to the task's output: name → CEL.
    pub exposes: Option<IndexMap<String, Option<String>>>,
}

/// Which mount prefix the agent sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MountScope {
    /// No mount.
    #[default]
    None,
    /// One prefix per task.
    Task,
    /// One prefix per agent, shared by its tasks.
    Agent,
    /// The namespace's prefix.
    Workspace,
}

/// Limits of one task; exceeding any terminates it with `limit_exceeded`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// LLM calls.
    pub max_turns: Option<u64>,
    /// Prompt tokens over all LLM calls.
    pub max_prompt_tokens: Option<u64>,
    /// Completion tokens over all LLM calls.
    pub max_completion_tokens: Option<u64>,
    /// Wall-clock age of the task.
    pub max_age: Option<Duration>,
    /// Capability invocations, delegations included.
    pub max_tool_calls: Option<u64>,
}

/// A capability: `"*"` (everything, no middleware, no bindings) or a configuration.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum CapabilityDecl {
    /// `"*"`.
    All(Wildcard),
    /// A configuration with at least one field.
    Config(Capability),
}

impl CapabilityDecl {
    /// The configuration; `None` for `"*"`.
    pub fn config(&self) -> Option<&Capability> {
        match self {
            CapabilityDecl::All(_) => None,
            CapabilityDecl::Config(c) => Some(c),
        }
    }
}

/// The literal `"*"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum Wildcard {
    /// Unrestricted access.
    #[serde(rename = "*")]
    All,
}

/// How an agent uses one tool or agent.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capability {
    /// Only these actions and events are active; `[]` hides everything.
    pub include: Option<Vec<String>>,
    /// Parameter name → CEL over `context`, `runtime`, `now`. Bound parameters are hidden from
    /// the LLM and their allow-list entries sealed.
    pub bindings: Option<IndexMap<String, String>>,
    /// Overrides the tool events' `timeout` (clamped to their `max_timeout`).
    pub event_timeout: Option<Duration>,
    /// Steps before the first invocation in a task.
    pub before_first: Option<Vec<MiddlewareStep>>,
    /// Steps before every invocation and event activation.
    pub before: Option<Vec<MiddlewareStep>>,
    /// Steps after every invocation and formatted event.
    pub after: Option<Vec<MiddlewareStep>>,
}

impl Capability {
    /// Whether no field is set (the invalid `{}`).
    pub fn is_empty(&self) -> bool {
        self.include.is_none()
            && self.bindings.is_none()
            && self.event_timeout.is_none()
            && self.before_first.is_none()
            && self.before.is_none()
            && self.after.is_none()
    }
}

/// Steps at the agent's boundary.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Guardrails {
    /// On incoming input.
    pub before: Option<Vec<MiddlewareStep>>,
    /// On the final response.
    pub after: Option<Vec<MiddlewareStep>>,
}
