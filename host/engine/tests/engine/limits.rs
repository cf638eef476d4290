//! Each of the five limits terminates the task with `limit_exceeded` and an event naming it.

use agentmesh_engine::{Reason, Run, Status};

use crate::util::{echo_agent, harness, limit};

fn agent(limits: &str) -> String {
    echo_agent(&format!("limits: {limits}\ncapabilities:\n  echo: \"*\"\n"))
}

/// Calls `echo_say` forever (each response calls it again).
const LOOPING: &str = "responses:
  - tool_calls: [{name: echo_say, arguments: {text: a}}]
    usage: {prompt_tokens: 100, completion_tokens: 10}
  - tool_calls: [{name: echo_say, arguments: {text: b}}]
    usage: {prompt_tokens: 100, completion_tokens: 10}
  - tool_calls: [{name: echo_say, arguments: {text: c}}]
    usage: {prompt_tokens: 100, completion_tokens: 10}
  - tool_calls: [{name: echo_say, arguments: {text: d}}]
    usage: {prompt_tokens: 100, completion_tokens: 10}
  - text: done
";

async fn terminated_by(limits: &str) -> Option<String> {
    let h = harness(&agent(limits), LOOPING);
    let task = h.run("t/a", "go").await;
    assert_eq!(task.status(), Status::Terminated, "{limits}");
    assert_eq!(task.reason, Some(Reason::LimitExceeded), "{limits}");
    limit(&h.events(&task))
}

#[tokio::test]
async fn max_turns() {
    assert_eq!(
        terminated_by("{max_turns: 2}").await.as_deref(),
        Some("max_turns")
    );
}

#[tokio::test]
async fn max_tool_calls() {
    assert_eq!(
        terminated_by("{max_tool_calls: 2}").await.as_deref(),
        Some("max_tool_calls")
    );
}

#[tokio::test]
async fn max_prompt_tokens() {
    assert_eq!(
        terminated_by("{max_prompt_tokens: 250}").await.as_deref(),
        Some("max_prompt_tokens")
    );
}

#[tokio::test]
async fn max_completion_tokens() {
    assert_eq!(
        terminated_by("{max_completion_tokens: 25}")
            .await
            .as_deref(),
        Some("max_completion_tokens")
    );
}

#[tokio::test]
async fn max_age() {
    let h = harness(&agent("{max_age: 1ms}"), LOOPING);
    let task = h
        .engine
        .create_task(
            agentmesh_engine::NewTask {
                agent: "t/a".into(),
                input: Some(serde_json::json!({"message": "go"})),
                user: agentmesh_engine::UserRef::default(),
            },
            Run::Caller,
        )
        .await
        .unwrap();
    // The task is older than 1 ms by the time its first LLM call is due.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let task = h.engine.run_until_idle(&task.id).await.unwrap();
    assert_eq!(task.reason, Some(Reason::LimitExceeded));
    assert_eq!(limit(&h.events(&task)).as_deref(), Some("max_age"));
}

#[tokio::test]
async fn without_limits_the_same_script_ends_idle() {
    let h = harness(&agent("{}"), LOOPING);
    let task = h.run("t/a", "go").await;
    assert_eq!(task.status(), Status::Idle);
    assert_eq!(task.tool_calls, 4);
}
