//! The scripted model: order, exhaustion, the per-task cursor, ids and usage.

use agentmesh_llm::{
    ChatMessage, ChatRequest, ChatResponse, EXHAUSTED_TEXT, LlmProvider, ScriptedProvider, Usage,
    estimate_completion_tokens, estimate_prompt_tokens,
};
use agentmesh_manifest::model::script::Script;
use agentmesh_model::event::ToolCall;
use serde_json::json;

fn provider() -> ScriptedProvider {
    let script: Script = serde_json::from_value(json!({
        "responses": [
            {
                "text": "Opening the PR",
                "tool_calls": [
                    {"name": "github_pr_create_pr", "arguments": {"title": "Fix", "author": "alice"}},
                    {"name": "notify", "arguments": {"channel": "#dev"}},
                ],
                "usage": {"prompt_tokens": 120, "completion_tokens": 30},
            },
            {"text": "Done."},
        ]
    }))
    .unwrap();
    ScriptedProvider::new(script)
}

fn request(task_id: &str, call_index: u64) -> ChatRequest {
    ChatRequest {
        task_id: task_id.into(),
        call_index,
        model: "scripts/pr.yaml".into(),
        messages: vec![ChatMessage::User {
            content: "Please fix the bug in the parser".into(),
        }],
        tools: Vec::new().into(),
        prompt_estimate: None,
    }
}

async fn complete(provider: &ScriptedProvider, request: &ChatRequest) -> ChatResponse {
    provider.complete(request).await.unwrap()
}

#[tokio::test]
async fn responses_are_consumed_in_order() {
    let provider = provider();
    let first = complete(&provider, &request("t_1", 0)).await;
    let second = complete(&provider, &request("t_1", 1)).await;
    assert_eq!(first.text, "Opening the PR");
    assert_eq!(
        first.tool_calls,
        vec![
            ToolCall {
                id: "call_0_0".into(),
                name: "github_pr_create_pr".into(),
                arguments: json!({"title": "Fix", "author": "alice"}),
            },
            ToolCall {
                id: "call_0_1".into(),
                name: "notify".into(),
                arguments: json!({"channel": "#dev"}),
            },
        ]
    );
    assert_eq!(first.id, "resp_0");
    assert_eq!(second.text, "Done.");
    assert!(second.tool_calls.is_empty());
    assert_eq!(second.id, "resp_1");
}

#[tokio::test]
async fn past_the_end_the_script_is_exhausted() {
    let provider = provider();
    for call_index in [2, 3, 1000, u64::MAX] {
        let response = complete(&provider, &request("t_1", call_index)).await;
        assert_eq!(response.text, EXHAUSTED_TEXT);
        assert_eq!(response.text, "(script exhausted)");
        assert!(response.tool_calls.is_empty());
    }
}

#[tokio::test]
async fn each_task_has_its_own_cursor() {
    let provider = provider();
    // Task a is ahead; task b starts from the beginning, and a restarted task continues where
    // its call index says, whatever the provider answered before.
    let a1 = complete(&provider, &request("t_a", 1)).await;
    let b0 = complete(&provider, &request("t_b", 0)).await;
    let a1_again = complete(&provider, &request("t_a", 1)).await;
    assert_eq!(a1.text, "Done.");
    assert_eq!(b0.text, "Opening the PR");
    assert_eq!(a1_again, a1);
}

#[tokio::test]
async fn usage_comes_from_the_script_or_is_estimated() {
    let provider = provider();
    let scripted = complete(&provider, &request("t_1", 0)).await;
    assert_eq!(
        scripted.usage,
        Usage {
            prompt_tokens: 120,
            completion_tokens: 30
        }
    );
    let request = request("t_1", 1);
    let estimated = complete(&provider, &request).await;
    assert_eq!(
        estimated.usage,
        Usage {
            prompt_tokens: estimate_prompt_tokens(&request.messages),
            completion_tokens: estimate_completion_tokens("Done.", &[]),
        }
    );
    // "Please fix the bug in the parser" is 32 characters; "Done." is 5.
    assert_eq!(estimated.usage.prompt_tokens, 8);
    assert_eq!(estimated.usage.completion_tokens, 1);
}

#[tokio::test]
async fn a_kept_prompt_estimate_is_the_estimated_usage() {
    // The caller (the engine's kept conversation) knows the estimate of the messages: the
    // model takes it instead of reading the whole conversation again.
    let request = ChatRequest {
        prompt_estimate: Some(3),
        ..request("t_1", 1)
    };
    let estimated = complete(&provider(), &request).await;
    assert_eq!(estimated.usage.prompt_tokens, 3);
}

#[tokio::test]
async fn an_empty_script_is_exhausted_at_once() {
    let provider = ScriptedProvider::new(Script::default());
    let response = complete(&provider, &request("t_1", 0)).await;
    assert_eq!(response.text, EXHAUSTED_TEXT);
    assert_eq!(response.id, "resp_0");
}
