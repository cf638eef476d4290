//! `kind: commonagents.info/v1beta2/trigger` and `kind: commonagents.info/v1/schedule`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{Duration, MiddlewareStep};

/// A trigger: creates a new task for `agent` when an event of a configured source passes.
/// ```yaml
/// kind: commonagents.info/v1beta2/trigger
/// namespace: engineering
/// name: new-issues
/// agent: triage-agent
/// owner: user:bot@example.com
/// source:
///   type: github
///   before:
///     - assert: "event.payload.action == 'opened'"
/// message: "New issue: {event.payload.issue.title}"
/// enabled: true
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Trigger {
    /// `commonagents.info/v1beta2/trigger`.
    pub kind: String,
    /// The namespace the trigger belongs to.
    pub namespace: String,
    /// Unique within the namespace.
    pub name: String,
    /// The agent (same namespace) the tasks are created for.
    pub agent: String,
    /// The user the tasks run as, never the sender.
    pub owner: String,
    /// Where events come from and which pass.
    pub source: TriggerSource,
    /// The task's first message: a `{…}` template over `event`.
    pub message: Option<String>,
    /// Values for the agent's parameters.
    pub inputs: Option<IndexMap<String, Value>>,
    /// Inactive triggers create no tasks. Defaults to true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// At most this many fires per hour; the excess is dropped and recorded.
    pub throttle: Option<Throttle>,
    /// The trigger fires one final time when this has passed since its creation, then deletes
    /// itself.
    pub ttl: Option<Duration>,
}

/// `source` of a trigger.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerSource {
    /// A source configured in the host config's `sources`.
    #[serde(rename = "type")]
    pub source_type: String,
    /// Assert steps over `event`; any failure creates no task.
    pub before: Option<Vec<MiddlewareStep>>,
}

/// A fire-rate cap.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Throttle {
    /// Fires per hour.
    pub max_per_hour: u32,
}

/// A schedule: creates a task for `agent` on every tick.
/// ```yaml
/// kind: commonagents.info/v1/schedule
/// namespace: engineering
/// name: daily-standup
/// agent: standup-agent
/// cron: "0 9 * * 1-5"
/// timezone: Australia/Sydney
/// owner: user:alice@example.com
/// inputs:
///   message: [{mimeType: text/plain, text: "Summarise today's stand-up."}]
/// enabled: true
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// `commonagents.info/v1/schedule`.
    pub kind: String,
    /// The namespace the schedule belongs to.
    pub namespace: String,
    /// Unique within the namespace.
    pub name: String,
    /// The agent (same namespace) the tasks are created for.
    pub agent: String,
    /// Five-field cron: minute hour day-of-month month day-of-week.
    pub cron: Option<String>,
    /// IANA time zone for `cron`; UTC when absent.
    pub timezone: Option<String>,
    /// Instead of `cron`: a fixed period (this host's extension).
    pub interval: Option<Duration>,
    /// Instead of `cron`: once, at this RFC 3339 instant (this host's extension).
    pub at: Option<String>,
    /// The user the tasks run as.
    pub owner: String,
    /// The task input: `message` and the agent's parameters.
    pub inputs: Option<IndexMap<String, Value>>,
    /// Inactive schedules do not tick. Defaults to true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// At most this many fires per hour.
    pub throttle: Option<Throttle>,
    /// Lifetime of the schedule.
    pub ttl: Option<Duration>,
}

fn yes() -> bool {
    true
}
