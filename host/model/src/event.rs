//! The event log's events (CONTRACT §4), as they are stored and served.
//!
//! Every task has an append-only log; an event is never changed or removed. Each event is
//! `{"seq", "id", "timestamp", "source", "kind", ...kind-specific fields}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event of a task's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// Unique id, `ev_…`.
    pub id: String,
    /// RFC 3339, UTC.
    pub timestamp: String,
    /// Who the event comes from.
    pub source: EventSource,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Who an event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventSource {
    /// The task's user (or a trigger acting as one).
    User,
    /// The agent (the LLM and the host on its behalf).
    Agent,
    /// Tools, the runtime, the outside world.
    Environment,
}

/// The kinds of event, named as in the event-log spec; `kind` is the tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum EventKind {
    /// The interpolated system prompt and the function schemas the LLM is given.
    SystemPromptEvent {
        /// The prompt text.
        prompt: String,
        /// The functions.
        tools: Vec<ToolSchema>,
    },
    /// A user or agent message.
    MessageEvent {
        /// The content.
        content: Vec<ContentPart>,
        /// For user messages: `queued_at` and, when not typed by a human, `trigger`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<MessageMetadata>,
    },
    /// A function call the LLM made.
    ActionEvent {
        /// The call.
        tool_call: ToolCall,
        /// Calls of one LLM response share this id (parallel function calling).
        llm_response_id: String,
        /// The response's text; only the first call of a response carries it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        thought: String,
    },
    /// A function call's result.
    ObservationEvent {
        /// The call it answers.
        tool_call_id: String,
        /// The function's name.
        tool_name: String,
        /// What the LLM sees (after `after` middleware).
        result: Value,
    },
    /// A call the middleware or a guardrail refused.
    UserRejectObservation {
        /// The call it answers.
        tool_call_id: String,
        /// The function's name.
        tool_name: String,
        /// Why, as the LLM is told.
        reason: String,
    },
    /// An error of the agent or the host, not of a tool.
    AgentErrorEvent {
        /// The call it answers, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
        /// The function's name, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_name: Option<String>,
        /// What went wrong.
        error: String,
    },
    /// An LLM-written summary of forgotten events.
    CondensationSummaryEvent {
        /// The summary.
        summary: String,
    },
    /// Events forgotten from the LLM's view (nothing is deleted from the log).
    Condensation {
        /// First forgotten sequence number.
        forgotten_from: u64,
        /// Last forgotten sequence number.
        forgotten_to: u64,
        /// Why it was condensed (the budget that was passed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A request to condense the history.
    CondensationRequest {},
    /// A state change: status, limits, subscriptions added/removed/expired, …
    ConversationStateUpdateEvent {
        /// What changed (`status`, `limit_exceeded`, `subscription_added`, …).
        key: String,
        /// Its new value.
        value: Value,
    },
    /// The user paused (interrupted) the task.
    PauseEvent {},
    /// A `review(user)` is waiting for a decision.
    ReviewRequestEvent {
        /// The id to answer with.
        review_id: String,
        /// Who must review.
        reviewer: String,
        /// What is under review (the step's input or output).
        subject: Value,
        /// The call whose `before` steps ask, when the review waits across a restart: once
        /// decided, that call runs again from its start and takes the decision instead of
        /// asking. Absent for every other review (a tool's own, an `after` step's, a
        /// guardrail's), which is asked again whenever what asks it runs again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    /// The decision on a review.
    ReviewDecisionEvent {
        /// The review answered.
        review_id: String,
        /// Approved or denied.
        approve: bool,
        /// Who decided (or `timeout`).
        decided_by: String,
    },
}

impl EventKind {
    /// The id of the call this event answers: an observation, a rejection, or an error of a
    /// call (`None` for every other event).
    pub fn answered_call(&self) -> Option<&str> {
        match self {
            EventKind::ObservationEvent { tool_call_id, .. }
            | EventKind::UserRejectObservation { tool_call_id, .. }
            | EventKind::AgentErrorEvent {
                tool_call_id: Some(tool_call_id),
                ..
            } => Some(tool_call_id),
            _ => None,
        }
    }

    /// The kind's name, as in the log's `kind` field.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::SystemPromptEvent { .. } => "SystemPromptEvent",
            EventKind::MessageEvent { .. } => "MessageEvent",
            EventKind::ActionEvent { .. } => "ActionEvent",
            EventKind::ObservationEvent { .. } => "ObservationEvent",
            EventKind::UserRejectObservation { .. } => "UserRejectObservation",
            EventKind::AgentErrorEvent { .. } => "AgentErrorEvent",
            EventKind::CondensationSummaryEvent { .. } => "CondensationSummaryEvent",
            EventKind::Condensation { .. } => "Condensation",
            EventKind::CondensationRequest { .. } => "CondensationRequest",
            EventKind::ConversationStateUpdateEvent { .. } => "ConversationStateUpdateEvent",
            EventKind::PauseEvent { .. } => "PauseEvent",
            EventKind::ReviewRequestEvent { .. } => "ReviewRequestEvent",
            EventKind::ReviewDecisionEvent { .. } => "ReviewDecisionEvent",
        }
    }
}

/// A function the LLM may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// The function name (`github_pr_create_pr`).
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// A function call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, unique in the task.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: Value,
}

/// One part of a message: `{"mimeType": "text/plain", "text": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentPart {
    /// The MIME type; `text/plain` for text.
    #[serde(rename = "mimeType")]
    pub mime_type: String,
    /// The text, for text parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A reference (e.g. a mount URI) for media parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

impl ContentPart {
    /// A `text/plain` part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart {
            mime_type: "text/plain".into(),
            text: Some(text.into()),
            uri: None,
        }
    }

    /// The text of a list of parts, joined by newlines.
    pub fn join(parts: &[ContentPart]) -> String {
        parts
            .iter()
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Metadata of a user message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageMetadata {
    /// When the input was queued, epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<i64>,
    /// Present when no human typed the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerEnvelope>,
}

/// Who fired a non-human turn (the triggers spec's envelope).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TriggerEnvelope {
    /// `schedule`, `webhook`, `api`, `self-schedule` or `mcp-event`.
    pub source: String,
    /// When the trigger resolved, epoch ms.
    pub fired_at: i64,
    /// The schedule entry, if persistent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<String>,
    /// The upstream's delivery id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// A safe subset of the delivery's headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Value>,
    /// Who authenticated the trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_subject: Option<String>,
}
