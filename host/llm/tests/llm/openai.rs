//! The OpenAI-compatible provider against a fake endpoint on 127.0.0.1.

use std::time::Duration;

use agentmesh_llm::{
    ChatMessage, ChatRequest, LlmError, LlmProvider, OpenAiConfig, OpenAiProvider, Usage,
    estimate_completion_tokens, estimate_prompt_tokens,
};
use agentmesh_model::event::{ToolCall, ToolSchema};
use serde_json::json;

use crate::fake_server::{FakeServer, Reply};

fn provider(base_url: &str, api_key: Option<&str>, max_retries: u32) -> OpenAiProvider {
    OpenAiProvider::try_new(OpenAiConfig {
        base_url: base_url.into(),
        api_key: api_key.map(str::to_owned),
        timeout: Duration::from_secs(10),
        max_retries,
    })
    .unwrap()
    .with_backoff(Duration::from_millis(1), Duration::from_millis(5))
}

fn request(messages: Vec<ChatMessage>) -> ChatRequest {
    ChatRequest {
        task_id: "t_1".into(),
        call_index: 2,
        model: "gpt-4o".into(),
        messages,
        tools: Vec::new().into(),
        prompt_estimate: None,
    }
}

fn hello() -> ChatRequest {
    request(vec![ChatMessage::User {
        content: "Hello there".into(),
    }])
}

fn answer(content: &str) -> Reply {
    Reply::ok(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }))
}

#[tokio::test]
async fn plain_answer_becomes_text_with_reported_usage() {
    let server = FakeServer::start(vec![answer("Hi!")]).await;
    let response = provider(&server.base_url, None, 0)
        .complete(&hello())
        .await
        .unwrap();
    assert_eq!(response.id, "chatcmpl-1");
    assert_eq!(response.text, "Hi!");
    assert!(response.tool_calls.is_empty());
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 12,
            completion_tokens: 3
        }
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
}

#[tokio::test]
async fn parallel_tool_calls_come_back_as_one_response() {
    let server = FakeServer::start(vec![Reply::ok(json!({
        "id": "chatcmpl-2",
        "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{not json"}},
        ]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 20},
    }))])
    .await;
    let response = provider(&server.base_url, None, 0)
        .complete(&hello())
        .await
        .unwrap();
    assert_eq!(response.id, "chatcmpl-2");
    assert_eq!(response.text, "");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            },
            ToolCall {
                id: "call_b".into(),
                name: "get_time".into(),
                arguments: json!({"_raw": "{not json"}),
            },
        ]
    );
}

#[tokio::test]
async fn missing_usage_is_estimated() {
    let server = FakeServer::start(vec![Reply::ok(json!({
        "id": "chatcmpl-3",
        "choices": [{"message": {"role": "assistant", "content": "Twelve chars"}}],
    }))])
    .await;
    let request = hello();
    let response = provider(&server.base_url, None, 0)
        .complete(&request)
        .await
        .unwrap();
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: estimate_prompt_tokens(&request.messages),
            completion_tokens: estimate_completion_tokens("Twelve chars", &[]),
        }
    );
    assert_eq!(response.usage.completion_tokens, 3);
}

#[tokio::test]
async fn rate_limit_is_retried_after_retry_after() {
    let server = FakeServer::start(vec![
        Reply::status(429, json!({"error": {"message": "slow down"}})).header("retry-after", "0"),
        answer("after the wait"),
    ])
    .await;
    let response = provider(&server.base_url, None, 3)
        .complete(&hello())
        .await
        .unwrap();
    assert_eq!(response.text, "after the wait");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_exhaust_the_retries() {
    let server = FakeServer::start(vec![Reply::status(
        500,
        json!({"error": {"message": "overloaded"}}),
    )])
    .await;
    let error = provider(&server.base_url, None, 2)
        .complete(&hello())
        .await
        .unwrap_err();
    match error {
        LlmError::Exhausted(message) => {
            assert!(message.contains("500"), "{message}");
            assert!(message.contains("overloaded"), "{message}");
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
    // One attempt and two retries.
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn bad_request_is_fatal_with_the_error_message() {
    let server = FakeServer::start(vec![Reply::status(
        400,
        json!({"error": {"message": "model `nope` does not exist", "type": "invalid_request_error"}}),
    )])
    .await;
    let error = provider(&server.base_url, None, 3)
        .complete(&hello())
        .await
        .unwrap_err();
    match error {
        LlmError::Fatal(message) => {
            assert!(message.contains("400"), "{message}");
            assert!(message.contains("model `nope` does not exist"), "{message}");
        }
        other => panic!("expected Fatal, got {other:?}"),
    }
    // Not retried.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_answer_over_the_size_cap_is_fatal() {
    let huge = "x".repeat(agentmesh_llm::MAX_ANSWER);
    let server = FakeServer::start(vec![answer(&huge)]).await;
    let error = provider(&server.base_url, None, 3)
        .complete(&hello())
        .await
        .unwrap_err();
    match error {
        LlmError::Fatal(message) => assert!(message.contains("answer is larger than"), "{message}"),
        other => panic!("expected Fatal, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 1, "not retried");
}

#[tokio::test]
async fn a_slow_endpoint_times_out_and_exhausts_the_retries() {
    let server = FakeServer::start(vec![answer("too late").delayed(Duration::from_secs(30))]).await;
    let provider = OpenAiProvider::try_new(OpenAiConfig {
        base_url: server.base_url.clone(),
        api_key: None,
        timeout: Duration::from_millis(200),
        max_retries: 1,
    })
    .unwrap()
    .with_backoff(Duration::from_millis(1), Duration::from_millis(5));
    let error = provider.complete(&hello()).await.unwrap_err();
    match error {
        LlmError::Exhausted(message) => assert!(message.contains("no answer within"), "{message}"),
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_unreachable_endpoint_is_fatal() {
    // A port that was free a moment ago and has no listener now.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let error = provider(&format!("http://127.0.0.1:{port}/v1"), None, 2)
        .complete(&hello())
        .await
        .unwrap_err();
    match error {
        LlmError::Fatal(message) => {
            assert!(message.contains("cannot reach"), "{message}");
            assert!(message.contains("3 attempts"), "{message}");
        }
        other => panic!("expected Fatal, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_base_url_fails_every_call_fatally() {
    let provider = OpenAiProvider::new(OpenAiConfig::new("not a url"));
    let error = provider.complete(&hello()).await.unwrap_err();
    assert!(matches!(error, LlmError::Fatal(m) if m.contains("invalid base_url")));
}

#[tokio::test]
async fn request_body_has_the_chat_completions_shape() {
    let server = FakeServer::start(vec![answer("ok")]).await;
    let mut request = request(vec![
        ChatMessage::System {
            content: "You help.".into(),
        },
        ChatMessage::User {
            content: "Weather?".into(),
        },
        ChatMessage::Assistant {
            content: Some("Checking.".into()),
            tool_calls: vec![ToolCall {
                id: "call_1_0".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            }],
        },
        ChatMessage::Tool {
            tool_call_id: "call_1_0".into(),
            content: "sunny".into(),
        },
    ]);
    request.tools = vec![ToolSchema {
        name: "get_weather".into(),
        description: "The weather in a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }]
    .into();
    provider(&server.base_url, Some("sk-test"), 0)
        .complete(&request)
        .await
        .unwrap();
    let sent = &server.requests()[0];
    assert_eq!(sent.headers["authorization"], "Bearer sk-test");
    assert_eq!(sent.headers["content-type"], "application/json");
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You help."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1_0", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1_0", "content": "sunny"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            }}],
        })
    );
}

#[tokio::test]
async fn without_key_and_tools_neither_is_sent() {
    let server = FakeServer::start(vec![answer("ok")]).await;
    provider(&server.base_url, None, 0)
        .complete(&hello())
        .await
        .unwrap();
    let sent = &server.requests()[0];
    assert!(!sent.headers.contains_key("authorization"));
    assert_eq!(
        sent.body,
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello there"}]})
    );
}
