//! The `scripted/<path>` model (CONTRACT §6): deterministic responses for tests and offline demos.
//!
//! Response `n` of the script answers a task's `n`-th LLM call (`ChatRequest::call_index`, from
//! 0); past the end the model answers [`EXHAUSTED_TEXT`]. The cursor comes with the request, so
//! one provider serves every task, and a task resumed after a restart continues where it was.
//! Ids are derived from the call index: the response is `resp_{n}`, its tool calls
//! `call_{n}_{i}` — unique in the task, and the same on every run.

use agentmesh_manifest::model::script::{Script, ScriptResponse};
use agentmesh_model::event::ToolCall;
use serde_json::{Map, Value};

use crate::{
    BoxFuture, ChatRequest, ChatResponse, LlmProvider, Result, Usage, estimate_completion_tokens,
};

/// The text of every response past the end of the script.
pub const EXHAUSTED_TEXT: &str = "(script exhausted)";

/// A deterministic model answering from a [`Script`].
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    script: Script,
}

impl ScriptedProvider {
    /// A provider answering from `script` (the file of `scripted/<path>`, already loaded).
    pub fn new(script: Script) -> Self {
        ScriptedProvider { script }
    }

    /// The response to a request; never fails.
    pub fn respond(&self, request: &ChatRequest) -> ChatResponse {
        let n = request.call_index;
        let scripted = usize::try_from(n)
            .ok()
            .and_then(|index| self.script.responses.get(index));
        let (text, tool_calls, usage) = match scripted {
            Some(ScriptResponse {
                text,
                tool_calls,
                usage,
            }) => {
                let calls = tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, call)| ToolCall {
                        id: format!("call_{n}_{i}"),
                        name: call.name.clone(),
                        arguments: Value::Object(
                            call.arguments
                                .iter()
                                .map(|(key, value)| (key.clone(), value.clone()))
                                .collect::<Map<_, _>>(),
                        ),
                    })
                    .collect();
                (text.clone().unwrap_or_default(), calls, *usage)
            }
            None => (EXHAUSTED_TEXT.to_owned(), Vec::new(), None),
        };
        let usage = match usage {
            Some(usage) => Usage {
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
            },
            None => Usage {
                prompt_tokens: request.prompt_estimate(),
                completion_tokens: estimate_completion_tokens(&text, &tool_calls),
            },
        };
        ChatResponse {
            id: format!("resp_{n}"),
            text,
            tool_calls,
            usage,
        }
    }
}

impl LlmProvider for ScriptedProvider {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse>> {
        let response = self.respond(request);
        tracing::debug!(task.id = %request.task_id, llm.call_index = request.call_index, llm.response_id = %response.id, "scripted response");
        Box::pin(std::future::ready(Ok(response)))
    }

    fn in_process(&self) -> bool {
        true
    }
}
