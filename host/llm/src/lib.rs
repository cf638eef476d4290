//! The LLM of agentmesh (CONTRACT §6): the providers an agent's `model: "<provider>/<name>"`
//! names, and the conversion of a task's event log into the chat messages they are sent.
//!
//! - [`LlmProvider`]: the extension point, one method ([`LlmProvider::complete`]);
//! - [`ScriptedProvider`] (`scripted/<path>`, module `scripted`): a deterministic model for
//!   tests and offline demos, answering from a [`Script`](agentmesh_manifest::model::script::Script);
//! - [`OpenAiProvider`] (`openai/<model>`, module `openai`): any OpenAI-compatible
//!   `POST {base_url}/chat/completions` endpoint (OpenAI, vLLM, llama.cpp, Ollama, …), with a
//!   per-request timeout and retries with backoff;
//! - [`to_messages`] (module `history`): the event log as [`ChatMessage`]s — parallel function
//!   calls grouped by `llm_response_id`, condensed events left out, every tool call answered.
//!
//! The engine builds a [`ChatRequest`] from the log before every LLM call, and records the
//! [`ChatResponse`] as events: its text as the first `ActionEvent`'s `thought` (or as an agent
//! `MessageEvent` when there are no tool calls), one `ActionEvent` per tool call, all with
//! `llm_response_id` = [`ChatResponse::id`].
//!
//! ```
//! use agentmesh_llm::{ChatMessage, ChatRequest, LlmProvider, ScriptedProvider, to_messages};
//! use agentmesh_manifest::model::script::Script;
//! use agentmesh_model::event::{ContentPart, Event, EventKind, EventSource};
//!
//! let script: Script = serde_json::from_value(serde_json::json!({
//!     "responses": [{"text": "Hello!"}]
//! })).unwrap();
//! let provider = ScriptedProvider::new(script);
//! let log = vec![Event {
//!     seq: 1,
//!     id: "ev_1".into(),
//!     timestamp: "2025-01-01T00:00:00Z".into(),
//!     source: EventSource::User,
//!     kind: EventKind::MessageEvent { content: vec![ContentPart::text("Hi")], metadata: None },
//! }];
//! let request = ChatRequest {
//!     task_id: "t_1".into(),
//!     call_index: 0,
//!     model: "scripts/hello.yaml".into(),
//!     messages: to_messages(&log),
//!     tools: Vec::new().into(),
//!     prompt_estimate: None,
//! };
//! assert_eq!(request.messages, vec![ChatMessage::User { content: "Hi".into() }]);
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let response = runtime.block_on(provider.complete(&request)).unwrap();
//! assert_eq!(response.text, "Hello!");
//! ```

mod history;
mod openai;
mod scripted;

use agentmesh_model::event::{ToolCall, ToolSchema};
use serde::Serialize;

pub use history::{Conversation, INTERRUPTED_CALL, SUMMARY_PREFIX, to_messages};
pub use openai::{Capped, MAX_ANSWER, MAX_RETRY_AFTER, OpenAiConfig, OpenAiProvider, read_capped};
pub use scripted::{EXHAUSTED_TEXT, ScriptedProvider};

/// A builder for an outgoing HTTP client: every HTTP client of the host (the LLM, the
/// `stateless_http` and `mcp` runtimes) starts here, so all of them speak TLS through the
/// host's one crypto provider (ring) and check certificates against the platform's roots.
pub fn http_client() -> reqwest::ClientBuilder {
    // The first installation wins; a later one (another client) changes nothing.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().user_agent(concat!("agentmesh/", env!("CARGO_PKG_VERSION")))
}

/// A boxed, sendable future: what [`LlmProvider::complete`] returns (the trait stays
/// object-safe, so the engine can hold a `dyn LlmProvider` per model).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The result of an LLM call.
pub type Result<T, E = LlmError> = std::result::Result<T, E>;

/// A chat message in the provider-neutral form the engine builds from the event log.
///
/// Serialized with a `role` tag (`{"role": "tool", "tool_call_id": …, "content": …}`), close to
/// the chat-completions shape, for logs and debugging.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// The system prompt.
    System {
        /// The prompt text.
        content: String,
    },
    /// A user message (typed by a human or made by a trigger), or a condensation summary.
    User {
        /// The text.
        content: String,
    },
    /// An LLM response: text, function calls, or both.
    Assistant {
        /// The text; `None` when the response only called functions.
        content: Option<String>,
        /// The function calls, all of one response (parallel function calling).
        tool_calls: Vec<ToolCall>,
    },
    /// The answer to one function call.
    Tool {
        /// The call it answers.
        tool_call_id: String,
        /// The result, as text.
        content: String,
    },
}

/// One LLM call.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The task the call is made for (for logs and the scripted model's per-task cursor).
    pub task_id: String,
    /// How many LLM calls this task made before this one (the scripted model's cursor; restart-safe).
    pub call_index: u64,
    /// The model name after the provider prefix (`gpt-4o`, or the script path for `scripted`).
    pub model: String,
    /// The conversation, usually [`to_messages`] of the task's log.
    pub messages: Vec<ChatMessage>,
    /// The functions the LLM may call (the `SystemPromptEvent`'s `tools`), shared by every
    /// request of an agent.
    pub tools: std::sync::Arc<[ToolSchema]>,
    /// [`estimate_prompt_tokens`] of `messages` when the caller keeps it (a [`Conversation`]
    /// adds each message's estimate as it grows), so that a provider reporting no usage does
    /// not read the whole conversation again at every call of a long task; `None`: it is
    /// worked out from `messages` when needed ([`ChatRequest::prompt_estimate`]).
    pub prompt_estimate: Option<u64>,
}

impl ChatRequest {
    /// [`estimate_prompt_tokens`] of the messages: the kept estimate if there is one.
    pub fn prompt_estimate(&self) -> u64 {
        self.prompt_estimate
            .unwrap_or_else(|| estimate_prompt_tokens(&self.messages))
    }
}

/// The LLM's answer to a [`ChatRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The provider's response id: every ActionEvent of this response gets it as `llm_response_id`.
    pub id: String,
    /// The text; empty when the response only called functions.
    pub text: String,
    /// The function calls, with ids unique in the task; several are run as one parallel batch.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens used, as reported by the provider or estimated ([`estimate_tokens`]).
    pub usage: Usage,
}

/// Tokens used by one LLM call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the request (messages and functions).
    pub prompt_tokens: u64,
    /// Tokens of the response.
    pub completion_tokens: u64,
}

/// Why an LLM call failed. Both variants end the task (`reason: error`); they differ in what the
/// operator should look at.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The endpoint cannot be reached, or answered non-retryably (4xx other than 429), or the
    /// configuration is invalid: terminates the task.
    #[error("LLM call failed: {0}")]
    Fatal(String),
    /// Retries on 429/5xx/timeouts exhausted.
    #[error("LLM call failed after retries: {0}")]
    Exhausted(String),
}

/// A source of LLM responses: one per configured model endpoint or script.
///
/// Lifecycle: the engine creates a provider when it loads the host config (or the script) and
/// keeps it for as long as that config is in force. It calls [`complete`](Self::complete) once
/// per LLM call of a task, never concurrently for one task but concurrently for different tasks;
/// a provider therefore keeps no per-task state — whatever it needs (the scripted model's cursor)
/// comes with the request, so a task resumed after a restart gets the same answers.
pub trait LlmProvider: Send + Sync {
    /// Answers one request. Transient failures are retried inside; an `Err` ends the task.
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse>>;

    /// Whether it answers from inside the process, reaching nothing outside (so a crash
    /// during a call loses nothing anyone saw). The engine writes a turn's progress before
    /// every call that is not.
    fn in_process(&self) -> bool {
        false
    }
}

/// A rough token estimate (chars / 4, at least 1 for non-empty text) used when a provider reports no usage.
pub fn estimate_tokens(text: &str) -> u64 {
    let chars = text.chars().count() as u64;
    if chars == 0 { 0 } else { (chars / 4).max(1) }
}

/// The [`estimate_tokens`] of a conversation: the sum over its messages' text, the tool calls'
/// names and JSON arguments included.
pub fn estimate_prompt_tokens(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(estimate_message_tokens).sum()
}

/// The [`estimate_tokens`] of one message: its text, its tool calls' names and JSON arguments.
/// A conversation's estimate is the sum over its messages, and an assistant message's the sum
/// of its text's and each call's ([`estimate_call_tokens`]), so either can be kept as a
/// running total while the conversation grows.
pub(crate) fn estimate_message_tokens(message: &ChatMessage) -> u64 {
    match message {
        ChatMessage::System { content }
        | ChatMessage::User { content }
        | ChatMessage::Tool { content, .. } => estimate_tokens(content),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            estimate_tokens(content.as_deref().unwrap_or_default())
                + estimate_tool_call_tokens(tool_calls)
        }
    }
}

/// The [`estimate_tokens`] of a response: its text plus each tool call's name and JSON arguments.
pub fn estimate_completion_tokens(text: &str, tool_calls: &[ToolCall]) -> u64 {
    estimate_tokens(text) + estimate_tool_call_tokens(tool_calls)
}

fn estimate_tool_call_tokens(tool_calls: &[ToolCall]) -> u64 {
    tool_calls.iter().map(estimate_call_tokens).sum()
}

/// The [`estimate_tokens`] of one tool call: its name and its JSON arguments.
pub(crate) fn estimate_call_tokens(call: &ToolCall) -> u64 {
    estimate_tokens(&call.name) + estimate_tokens(&call.arguments.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn estimate_is_a_quarter_of_the_chars_and_at_least_one() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        // Characters, not bytes: four two-byte letters are one token.
        assert_eq!(estimate_tokens("éééé"), 1);
    }

    #[test]
    fn completion_estimate_counts_tool_calls() {
        let call = ToolCall {
            id: "call_0_0".into(),
            name: "lookup".into(),
            arguments: json!({"q": "x"}),
        };
        // "lookup" → 1, `{"q":"x"}` (9 chars) → 2.
        assert_eq!(
            estimate_completion_tokens("", std::slice::from_ref(&call)),
            3
        );
        assert_eq!(estimate_completion_tokens("abcd", &[call]), 4);
    }

    #[test]
    fn chat_messages_serialize_with_a_role_tag() {
        let message = ChatMessage::Tool {
            tool_call_id: "c1".into(),
            content: "ok".into(),
        };
        assert_eq!(
            serde_json::to_value(message).unwrap_or_default(),
            json!({"role": "tool", "tool_call_id": "c1", "content": "ok"})
        );
    }
}
