//! Event subscriptions: which tool events a task hears, and for how long.
//!
//! A task subscribes at creation to every webhook event of every tool capability its agent
//! has (filtered by `include`). A subscription's effective timeout is
//! clamp(capability `event_timeout` ?? event `timeout` ?? ∞, max = event `max_timeout` ?? ∞)
//! (CONTRACT §5), counted from the task's last processing step: every step resets it, and
//! expiry removes the subscription only (the task is untouched). An interrupt removes a task's
//! subscriptions until it takes new input.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use agentmesh_model::event::{EventKind, EventSource};
use serde_json::{Value, json};

use crate::plan::{AgentPlan, Target};

/// One event subscription of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// The tool, `namespace/name`.
    pub tool: String,
    /// The event's name.
    pub event: String,
    /// The effective timeout in ms; `None`: never expires.
    pub timeout_ms: Option<u64>,
}

impl Subscription {
    /// When it expires (epoch ms), given the task's last processing step.
    pub fn expires_at(&self, last_activity_ms: i64) -> Option<i64> {
        self.timeout_ms
            .map(|t| last_activity_ms.saturating_add(i64::try_from(t).unwrap_or(i64::MAX)))
    }

    /// Whether it has expired at `now_ms`.
    pub fn expired(&self, last_activity_ms: i64, now_ms: i64) -> bool {
        self.expires_at(last_activity_ms)
            .is_some_and(|at| at <= now_ms)
    }
}

/// The subscriptions a new task of `agent` starts with.
pub fn for_agent(agent: &AgentPlan) -> Vec<Subscription> {
    let mut out = Vec::new();
    for cap in &agent.capabilities {
        let Target::Tool(tool) = &cap.target else {
            continue;
        };
        for event in tool.events.iter().filter(|e| cap.includes(&e.name)) {
            let wanted = cap.event_timeout.or(event.timeout);
            let timeout = match (wanted, event.max_timeout) {
                (Some(t), Some(max)) => Some(t.min(max)),
                (None, Some(max)) => Some(max),
                (t, None) => t,
            };
            out.push(Subscription {
                tool: tool.id(),
                event: event.name.clone(),
                timeout_ms: timeout.map(millis),
            });
        }
    }
    out
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Removes the `subscriptions` of a task last active at `last_activity_ms` that have expired
/// at `now_ms`; returns the event saying which (none when nothing expired).
pub(crate) fn prune_expired(
    subscriptions: &mut Vec<Subscription>,
    last_activity_ms: i64,
    now_ms: i64,
) -> Option<(EventSource, EventKind)> {
    let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(subscriptions)
        .into_iter()
        .partition(|s| s.expired(last_activity_ms, now_ms));
    *subscriptions = kept;
    if expired.is_empty() {
        return None;
    }
    let gone: Vec<Value> = expired
        .iter()
        .map(|s| json!({"tool": s.tool, "event": s.event}))
        .collect();
    Some((
        EventSource::Environment,
        EventKind::ConversationStateUpdateEvent {
            key: "subscriptions_expired".into(),
            value: Value::Array(gone),
        },
    ))
}
