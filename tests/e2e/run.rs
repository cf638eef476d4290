//! `agentmesh run` and `agentmesh events` on the quickstart, as a user runs them.

use std::path::Path;

use crate::util::{agentmesh, events, first, run_json};

fn quickstart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/quickstart")
        .display()
        .to_string()
}

/// `agentmesh run examples/quickstart ARGS…`: (exit code, stdout, stderr).
fn run_quickstart(args: &[&str]) -> (Option<i32>, String, String) {
    let quickstart = quickstart();
    agentmesh(&[&["run", quickstart.as_str()], args].concat())
}

#[test]
fn run_answers_offline_with_the_scripted_model() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let (code, out, err) = run_quickstart(&[
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

    // A data dir without a store is an error, and stays without one.
    let missing = data.path().join("mistyped");
    let (code, _, err) = agentmesh(&[
        "events",
        "--data",
        missing.to_str().unwrap(),
        task["id"].as_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no store in"), "{err}");
    assert!(!missing.exists());
}

#[test]
fn run_continues_a_task_from_the_same_data_dir() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let (_, out, _) = run_quickstart(&[
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
    let again = |agent| {
        run_quickstart(&[
            "--agent", agent, "--task", id, "-m", "again", "--data", data, "--json",
        ])
    };
    let (code, out, err) = again("demo/assistant");
    assert_eq!(code, Some(0), "{err}");
    let task: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["output"].as_array().unwrap().len(), 2);
    // The script is exhausted on the third LLM call of the task, which proves the cursor
    // continued instead of restarting.
    assert_eq!(
        task["output"][1]["message"][0]["text"],
        "(script exhausted)"
    );

    // Without input, nothing runs, and `run` says what it waits for.
    let (code, out, err) = run_quickstart(&["--agent", "demo/assistant", "--data", data]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "");
    assert!(err.contains("no input given"), "{err}");

    // Continuing it as another agent is refused, and adds nothing to it.
    let (code, _, err) = again("demo/other");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("runs agent `demo/assistant`, not `demo/other`"),
        "{err}"
    );
    let (_, out, _) = agentmesh(&["events", "--data", data, id]);
    assert_eq!(out.matches("\"source\":\"user\"").count(), 2, "{out}");

    // Continuing it from a data dir it never ran in names the problem and creates no store.
    let elsewhere = tempfile::tempdir().unwrap();
    let elsewhere = elsewhere.path().join("data");
    let (code, _, err) = run_quickstart(&[
        "--agent",
        "demo/assistant",
        "--task",
        id,
        "--data",
        elsewhere.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no store in"), "{err}");
    assert!(!elsewhere.join("store").exists());
}

/// An agent `t/NAME` on the model `scripted/MODEL`, its manifest ending with `rest`.
fn agent(name: &str, description: &str, model: &str, rest: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/agent
namespace: t
name: {name}
description: {description}
prompt: Hi.
model: scripted/{model}
{rest}"
    )
}

/// Runs `agentmesh run DIR --agent AGENT -m hi` on a config dir of `manifests` (one file)
/// and the model script `script.yaml`: (exit code, stdout, stderr).
fn run_in(manifests: &str, script: &str, agent: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("manifests.yaml"), manifests).unwrap();
    std::fs::write(dir.path().join("script.yaml"), script).unwrap();
    let dir = dir.path().to_str().unwrap();
    agentmesh(&["run", dir, "--agent", agent, "-m", "hi"])
}

#[test]
fn run_exits_2_when_the_task_terminates() {
    let (code, _, err) = run_in(
        &agent(
            "a",
            "Always locked.",
            "script.yaml",
            "guardrails:\n  before:\n    - assert: \"false\"\n",
        ),
        "responses: []\n",
        "t/a",
    );
    assert_eq!(code, Some(2), "{err}");
    // Why, as the log says: the reason and the message of the step that ended it.
    assert!(
        err.contains("terminated: locked: assertion `false` is false"),
        "{err}"
    );
}

#[test]
fn run_says_which_limit_ended_the_task() {
    let (code, _, err) = run_in(
        &agent(
            "a",
            "One capability call at most.",
            "script.yaml",
            "limits: {max_tool_calls: 1}\n",
        ),
        "responses:
  - tool_calls:
      - {name: request_wakeup, arguments: {delay: 60}}
      - {name: request_wakeup, arguments: {delay: 120}}
  - text: never
",
        "t/a",
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "terminated: limit_exceeded (max_tool_calls): no more capability calls: the limit of 1 is reached"
        ),
        "{err}"
    );
}

#[test]
fn run_finds_a_script_named_two_ways() {
    let manifests = [
        agent("a", "The script by one name.", "script.yaml", ""),
        agent("b", "The same script by another.", "./script.yaml", ""),
    ]
    .join("---\n");
    for id in ["t/a", "t/b"] {
        let (code, out, err) = run_in(&manifests, "responses:\n  - text: hello\n", id);
        assert_eq!(code, Some(0), "{id}: {err}");
        assert_eq!(out.trim(), "hello", "{id}: {err}");
    }
}

#[test]
fn run_refuses_an_unknown_agent_and_invalid_input() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let (code, _, err) = run_quickstart(&["--agent", "demo/nobody", "-m", "hi", "--data", data]);
    assert_eq!(code, Some(1));
    assert!(err.contains("agent `demo/nobody`"), "{err}");
    let (code, _, err) = run_quickstart(&[
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

/// Arguments that are not a JSON object (an OpenAI-compatible provider keeps them as
/// `{"_raw": …}`) come back to the LLM as that, not as a missing argument.
#[test]
fn arguments_that_are_not_json_are_reported_to_the_llm_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let tool = "kind: commonagents.info/v1beta2/tool
namespace: t
name: calc
description: Adds.
actions:
  - name: add
    description: Add.
    parameters: {type: object, properties: {a: {type: integer}}}
    execute:
      cel: {expression: \"{'sum': input.a + 1}\"}
---
";
    std::fs::write(
        dir.path().join("manifests.yaml"),
        [
            tool,
            &agent(
                "a",
                "Calls calc.",
                "script.yaml",
                "capabilities:\n  calc: \"*\"\n",
            ),
        ]
        .concat(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "responses:\n  - tool_calls: [{name: calc, arguments: {_raw: '{\"a\": 1'}}]\n  - text: fixed\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "hi", &data, &[]);
    let events = events(&data, &task);
    let observation = first(&events, "ObservationEvent");
    assert_eq!(
        observation["result"]["error"],
        "the arguments are not a JSON object: `{\"a\": 1`; send them as one JSON object",
        "{observation}"
    );
}
