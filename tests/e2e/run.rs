//! `agentmesh run` and `agentmesh events` on the quickstart, as a user runs them.

use std::path::Path;

use crate::util::{agentmesh, events, run_json};

fn quickstart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/quickstart")
        .display()
        .to_string()
}

#[test]
fn run_answers_offline_with_the_scripted_model() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let (code, out, err) = agentmesh(&[
        "run",
        &quickstart(),
        "--agent",
        "demo/assistant",
        "-m",
        "What is 6 × 7?",
        "--data",
        data,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "6 × 7 = 42.");
}

#[test]
fn run_json_prints_the_task_object_and_events_prints_the_log() {
    let data = tempfile::tempdir().unwrap();
    let task = run_json(
        Path::new(&quickstart()),
        "demo/assistant",
        "hi",
        data.path(),
        &[],
    );
    assert_eq!(task["status"], "idle");
    assert_eq!(task["agent"], "demo/assistant");
    assert_eq!(task["exposes"]["multiplications"], 1);
    let events = events(data.path(), &task);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for kind in [
        "SystemPromptEvent",
        "MessageEvent",
        "ActionEvent",
        "ObservationEvent",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[test]
fn run_continues_a_task_from_the_same_data_dir() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let (_, out, _) = agentmesh(&[
        "run",
        &quickstart(),
        "--agent",
        "demo/assistant",
        "-m",
        "hi",
        "--data",
        data,
        "--json",
    ]);
    let task: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = task["id"].as_str().unwrap();
    let (code, out, err) = agentmesh(&[
        "run",
        &quickstart(),
        "--agent",
        "demo/assistant",
        "--task",
        id,
        "-m",
        "again",
        "--data",
        data,
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let task: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["output"].as_array().unwrap().len(), 2);
    // The script is exhausted on the third LLM call of the task, which proves the cursor
    // continued instead of restarting.
    assert_eq!(
        task["output"][1]["message"][0]["text"],
        "(script exhausted)"
    );
}

#[test]
fn run_exits_2_when_the_task_terminates() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Always locked.
prompt: Hi.
model: scripted/script.yaml
guardrails:
  before:
    - assert: \"false\"
",
    )
    .unwrap();
    std::fs::write(dir.path().join("script.yaml"), "responses: []\n").unwrap();
    let (code, _, err) = agentmesh(&[
        "run",
        dir.path().to_str().unwrap(),
        "--agent",
        "t/a",
        "-m",
        "hi",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("terminated"), "{err}");
}

#[test]
fn run_refuses_an_unknown_agent_and_invalid_input() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let (code, _, err) = agentmesh(&[
        "run",
        &quickstart(),
        "--agent",
        "demo/nobody",
        "-m",
        "hi",
        "--data",
        data,
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("agent `demo/nobody`"), "{err}");
    let (code, _, err) = agentmesh(&[
        "run",
        &quickstart(),
        "--agent",
        "demo/assistant",
        "--param",
        "colour=red",
        "-m",
        "x",
        "--data",
        data,
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("`colour` is not a parameter"), "{err}");
}
