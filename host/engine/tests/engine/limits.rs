//! Each of the five limits terminates the task with `limit_exceeded` and an event naming it.

use agentmesh_engine::{Reason, Run, Status};
use serde_json::json;

use crate::util::{echo_agent, harness, harness_with, limit, observations};

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

/// Condensing the log is an LLM call, counted like any other: the agent's own call it made
/// room for is then past `max_turns`, and does not run.
#[tokio::test]
async fn max_turns_counts_the_condensing_call() {
    let script = "responses:
  - tool_calls: [{name: echo_say, arguments: {text: one}}]
  - text: SUMMARY
  - tool_calls: [{name: echo_say, arguments: {text: past-the-limit}}]
  - text: done
";
    let host = "kind: agentmesh/v1/host\ncondensation: {max_events: 2, keep_recent: 1}\n";
    let h = harness_with(
        &agent("{max_turns: 2}"),
        &[("script.yaml", script), ("host.yaml", host)],
    );
    let task = h.run("t/a", "go").await;
    let events = h.events(&task);
    assert_eq!(task.reason, Some(Reason::LimitExceeded));
    assert_eq!(limit(&events).as_deref(), Some("max_turns"));
    assert_eq!(task.llm_calls, 2, "an LLM call past the limit was made");
    assert_eq!(
        observations(&events),
        [json!({"text": "one", "owner": "nobody"})],
        "a call the third LLM call asked for ran"
    );
}

/// A call does not run once the task is past its `max_age` (here the first of two parallel
/// calls outlasts it; a review that waited long would do the same).
#[tokio::test]
async fn max_age_stops_a_call_due_after_it() {
    let (port, received) = agentmesh_testkit::serve(2, |_| {
        std::thread::sleep(std::time::Duration::from_millis(800));
        ("200 OK", "{}".into())
    });
    let slow = agentmesh_testkit::fixtures::slow_tool("t", port);
    let script = "responses:
  - tool_calls:
      - {name: slow, arguments: {}}
      - {name: echo_say, arguments: {text: after-max-age}}
  - text: done
";
    let agent =
        echo_agent("limits: {max_age: 500ms}\ncapabilities:\n  echo: \"*\"\n  slow: \"*\"\n");
    let h = harness(&format!("{slow}{agent}"), script);
    let task = h.run("t/a", "go").await;
    let events = h.events(&task);
    assert_eq!(task.reason, Some(Reason::LimitExceeded));
    assert_eq!(limit(&events).as_deref(), Some("max_age"));
    assert!(
        received
            .recv_timeout(std::time::Duration::from_secs(5))
            .is_ok(),
        "the first call should have run"
    );
    assert!(
        !observations(&events).contains(&json!({"text": "after-max-age", "owner": "nobody"})),
        "a call ran after the task's max_age: {:?}",
        observations(&events)
    );
}
