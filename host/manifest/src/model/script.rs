//! The file of a `scripted/<path>` model: the responses of a deterministic LLM (CONTRACT §6).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A script. Responses are consumed in order, one per LLM call, per task; when they run out the
/// model answers `(script exhausted)`.
/// ```yaml
/// responses:
///   - text: "Opening the PR"
///     tool_calls:
///       - {name: github_pr_create_pr, arguments: {title: "Fix", author: "alice"}}
///     usage: {prompt_tokens: 120, completion_tokens: 30}
///   - text: "Done."
/// ```
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// One per LLM call.
    #[serde(default)]
    pub responses: Vec<ScriptResponse>,
}

impl Script {
    /// The JSON Schema of a model script (`agentmesh schema script`).
    pub fn schema() -> serde_json::Value {
        schemars::schema_for!(Script).to_value()
    }
}

/// One scripted LLM response.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptResponse {
    /// The assistant text.
    pub text: Option<String>,
    /// Function calls, run in parallel as one response.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Token usage; estimated from the text when absent.
    pub usage: Option<Usage>,
}

/// A scripted function call.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// The function name, as the LLM sees it.
    pub name: String,
    /// The arguments.
    #[serde(default)]
    pub arguments: IndexMap<String, Value>,
}

/// Token usage of one response.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}
