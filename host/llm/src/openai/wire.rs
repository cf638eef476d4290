//! The chat-completions JSON: the request body built from a [`ChatRequest`], the response parsed
//! into a [`ChatResponse`], and the message of an error body.
//!
//! Parsing is lenient where OpenAI-compatible servers differ (a null or missing `content`, a
//! missing `id` or `usage`, arguments as an object instead of a JSON string, `content` as a list
//! of parts) and strict only where nothing sensible can be made of the answer (no `choices`).

use std::collections::HashSet;

use agentmesh_model::event::ToolCall;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::{ChatMessage, ChatRequest, ChatResponse, Usage, estimate_completion_tokens};

/// How much of an error body that is not JSON is kept in the error.
const MAX_ERROR_TEXT: usize = 500;

/// The body of `POST /chat/completions` (tools omitted when there are none).
pub(super) fn request_body(request: &ChatRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(request.model.clone()));
    body.insert(
        "messages".into(),
        Value::Array(request.messages.iter().map(message).collect()),
    );
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    Value::Object(body)
}

fn message(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::System { content } => json!({"role": "system", "content": content}),
        ChatMessage::User { content } => json!({"role": "user", "content": content}),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            // `content` may be null only beside tool calls; some servers reject it otherwise.
            let content = match content {
                Some(text) => Value::String(text.clone()),
                None if tool_calls.is_empty() => Value::String(String::new()),
                None => Value::Null,
            };
            out.insert("content".into(), content);
            if !tool_calls.is_empty() {
                let calls = tool_calls
                    .iter()
                    .map(|call| {
                        json!({
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments.to_string()},
                        })
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(out)
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: WireMessage,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// Parses a 2xx answer; the error says what is wrong with it.
pub(super) fn parse_response(body: &[u8], request: &ChatRequest) -> Result<ChatResponse, String> {
    let completion: Completion = serde_json::from_slice(body)
        .map_err(|e| format!("the endpoint answered something that is not a completion: {e}"))?;
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err("the endpoint answered a completion without choices".into());
    };
    let text = choice
        .message
        .content
        .as_ref()
        .map(text)
        .unwrap_or_default();
    let tool_calls = tool_calls(choice.message.tool_calls.unwrap_or_default(), request);
    let n = request.call_index;
    let usage = completion.usage.unwrap_or(WireUsage {
        prompt_tokens: None,
        completion_tokens: None,
    });
    let usage = Usage {
        prompt_tokens: usage
            .prompt_tokens
            .unwrap_or_else(|| request.prompt_estimate()),
        completion_tokens: usage
            .completion_tokens
            .unwrap_or_else(|| estimate_completion_tokens(&text, &tool_calls)),
    };
    Ok(ChatResponse {
        id: completion
            .id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("resp_{n}")),
        text,
        tool_calls,
        usage,
    })
}

/// The text of a message's `content`: a string, or the text of a list of parts.
fn text(content: &Value) -> String {
    match content {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    }
}

/// The response's calls, with ids unique in the task: a missing id, or one already used in
/// the conversation or the response (some local servers number calls from 0 in every
/// response), is replaced by `call_{call_index}_{i}`.
fn tool_calls(calls: Vec<WireToolCall>, request: &ChatRequest) -> Vec<ToolCall> {
    let mut used: HashSet<String> = request
        .messages
        .iter()
        .filter_map(|message| match message {
            ChatMessage::Assistant { tool_calls, .. } => Some(tool_calls),
            _ => None,
        })
        .flatten()
        .map(|call| call.id.clone())
        .collect();
    calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| {
            let id = match call.id.filter(|id| !id.is_empty() && !used.contains(id)) {
                Some(id) => id,
                None => fresh_id(&used, request.call_index, i),
            };
            used.insert(id.clone());
            ToolCall {
                id,
                name: call.function.name,
                arguments: arguments(call.function.arguments),
            }
        })
        .collect()
}

fn fresh_id(used: &HashSet<String>, call_index: u64, i: usize) -> String {
    let base = format!("call_{call_index}_{i}");
    let mut id = base.clone();
    let mut suffix = 1u32;
    while used.contains(&id) {
        id = format!("{base}_{suffix}");
        suffix += 1;
    }
    id
}

/// A call's arguments as a JSON object. They come as a JSON string (as OpenAI sends them) or an
/// object (as some servers do); empty means none, and anything unparsable is kept as
/// `{"_raw": "<string>"}` for the engine to report to the LLM rather than failing the task.
fn arguments(arguments: Option<Value>) -> Value {
    match arguments {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(object)) => Value::Object(object),
        Some(Value::String(raw)) if raw.trim().is_empty() => Value::Object(Map::new()),
        Some(Value::String(raw)) => match serde_json::from_str::<Value>(&raw) {
            Ok(Value::Object(object)) => Value::Object(object),
            Ok(Value::Null) => Value::Object(Map::new()),
            _ => json!({"_raw": raw}),
        },
        Some(other) => json!({"_raw": other.to_string()}),
    }
}

/// The message of an error answer: `error.message`, `error` (a string), `message` or `detail`,
/// else the start of the body.
pub(super) fn error_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let candidates = [
            value.pointer("/error/message"),
            value.get("error"),
            value.get("message"),
            value.get("detail"),
        ];
        for candidate in candidates.into_iter().flatten() {
            if let Some(text) = candidate.as_str() {
                return text.to_owned();
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(MAX_ERROR_TEXT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests fail loudly.
mod tests {
    use super::*;

    fn request(messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            task_id: "t_1".into(),
            call_index: 3,
            model: "m".into(),
            messages,
            tools: Vec::new().into(),
            prompt_estimate: None,
        }
    }

    #[test]
    fn unparsable_arguments_are_kept_raw() {
        assert_eq!(
            arguments(Some(json!("{not json"))),
            json!({"_raw": "{not json"})
        );
        assert_eq!(arguments(Some(json!("[1]"))), json!({"_raw": "[1]"}));
        assert_eq!(arguments(Some(json!(r#"{"a":1}"#))), json!({"a": 1}));
        assert_eq!(arguments(Some(json!({"a": 1}))), json!({"a": 1}));
        assert_eq!(arguments(Some(json!(""))), json!({}));
        assert_eq!(arguments(None), json!({}));
    }

    #[test]
    fn reused_or_missing_call_ids_are_replaced() {
        let earlier = ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "call_0".into(),
                name: "f".into(),
                arguments: json!({}),
            }],
        };
        let body = json!({
            "id": "",
            "choices": [{"message": {"content": null, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"type": "function", "function": {"name": "g", "arguments": "{}"}},
                {"id": "x", "type": "function", "function": {"name": "h"}},
                {"id": "x", "type": "function", "function": {"name": "h"}},
            ]}}]
        });
        let response =
            parse_response(body.to_string().as_bytes(), &request(vec![earlier])).unwrap();
        let ids: Vec<_> = response.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_3_0", "call_3_1", "x", "call_3_3"]);
        assert_eq!(response.id, "resp_3");
        assert_eq!(response.text, "");
    }

    #[test]
    fn content_parts_are_joined() {
        let body = json!({"choices": [{"message": {"content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}
        ]}}]});
        let response = parse_response(body.to_string().as_bytes(), &request(vec![])).unwrap();
        assert_eq!(response.text, "ab");
    }

    #[test]
    fn a_completion_without_choices_is_an_error() {
        let error = parse_response(br#"{"id": "x", "choices": []}"#, &request(vec![]));
        assert!(error.unwrap_err().contains("without choices"));
    }

    #[test]
    fn error_messages_come_from_the_usual_places() {
        assert_eq!(
            error_message(
                br#"{"error": {"message": "bad model", "type": "invalid_request_error"}}"#
            ),
            "bad model"
        );
        assert_eq!(
            error_message(br#"{"error": "model not found"}"#),
            "model not found"
        );
        assert_eq!(
            error_message(br#"{"object": "error", "message": "too long"}"#),
            "too long"
        );
        assert_eq!(error_message(b"  plain text\n"), "plain text");
        let long = "x".repeat(MAX_ERROR_TEXT + 10);
        assert_eq!(
            error_message(long.as_bytes()).chars().count(),
            MAX_ERROR_TEXT + 1
        );
    }

    #[test]
    fn assistant_content_is_null_only_beside_tool_calls() {
        let empty = message(&ChatMessage::Assistant {
            content: None,
            tool_calls: vec![],
        });
        assert_eq!(empty, json!({"role": "assistant", "content": ""}));
    }
}
