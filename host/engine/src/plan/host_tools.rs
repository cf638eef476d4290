//! The host tools every agent has besides its capabilities: `request_wakeup` and
//! `cancel_wakeup` (run by the engine's `wakeups`).

use agentmesh_model::event::ToolSchema;
use serde_json::json;

/// A host tool every agent has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostTool {
    /// `request_wakeup({when, prompt, reason})` → `{schedule_id}`.
    RequestWakeup,
    /// `cancel_wakeup({schedule_id})`.
    CancelWakeup,
}

impl HostTool {
    /// Both, in the order the LLM sees them.
    pub const ALL: [HostTool; 2] = [HostTool::RequestWakeup, HostTool::CancelWakeup];

    /// The function name.
    pub fn name(self) -> &'static str {
        match self {
            HostTool::RequestWakeup => "request_wakeup",
            HostTool::CancelWakeup => "cancel_wakeup",
        }
    }

    /// The schema the LLM is given.
    pub fn schema(self) -> ToolSchema {
        match self {
            HostTool::RequestWakeup => ToolSchema {
                name: self.name().into(),
                description: "Schedules a wakeup of this task: when it comes, `prompt` arrives as \
                              a new user message in this conversation. Returns a schedule_id."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "when": {
                            "type": "object",
                            "description": "{\"kind\": \"delay_ms\", \"value\": 300000}, {\"kind\": \"cron\", \"value\": \"*/5 * * * *\"} (UTC) or {\"kind\": \"at\", \"value\": \"2026-06-01T12:00:00Z\"}",
                            "properties": {
                                "kind": {"type": "string", "enum": ["delay_ms", "cron", "at"]},
                                "value": {"type": ["integer", "string"]}
                            },
                            "required": ["kind", "value"]
                        },
                        "prompt": {"type": "string", "description": "The message to receive when woken."},
                        "reason": {"type": "string", "description": "Why, in a few words; shown to the user."}
                    },
                    "required": ["when", "prompt", "reason"]
                }),
            },
            HostTool::CancelWakeup => ToolSchema {
                name: self.name().into(),
                description: "Cancels a wakeup this task requested.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"schedule_id": {"type": "string"}},
                    "required": ["schedule_id"]
                }),
            },
        }
    }
}
