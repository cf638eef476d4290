//! Bindings, include, middleware, transforms, delegation, mount, exposes.

use std::sync::Arc;

use agentmesh_engine::{DirectEnd, Reason, Status, TaskRecord, UserRef};
use agentmesh_model::event::EventKind;
use serde_json::json;

use crate::util::{
    ECHO_TOOL, Harness, RESEARCHER, SCRIPTED_AGENT, functions, harness, harness_with, observations,
};

fn agent(capability: &str) -> String {
    format!(
        "{ECHO_TOOL}kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Test agent.
prompt: You help {{context.user.id}}.
model: scripted/script.yaml
capabilities:
{capability}"
    )
}

const SAY_EVIL: &str = "responses:
  - tool_calls:
      - {name: echo_say, arguments: {text: hi, owner: evil}}
  - text: done
";

#[tokio::test]
async fn bindings_hide_the_parameter_and_win_over_the_llm() {
    let h = harness(
        &agent("  echo:\n    bindings: {owner: \"'acme'\"}\n"),
        SAY_EVIL,
    );
    let task = h.run("t/a", "go").await;
    let events = h.events(&task);
    assert_eq!(
        observations(&events),
        [json!({"owner": "acme", "text": "hi"})]
    );
    let schema = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::SystemPromptEvent { tools, .. } => Some(tools[0].parameters.clone()),
            _ => None,
        })
        .unwrap();
    assert!(schema["properties"].get("owner").is_none(), "{schema}");
    assert!(schema["properties"].get("text").is_some(), "{schema}");
    // The bound parameter's allow list is sealed to the binding's value.
    assert_eq!(
        task.allow_lists["t/echo"]["owner"]
            .iter()
            .collect::<Vec<_>>(),
        ["acme"]
    );
}

/// A call that ran but an `after` step refused is recorded as refused: a later step or
/// binding reading `outputs[0]` sees the refusal, not what the LLM was kept from, and its
/// values do not join the allow list (no events about what it was refused).
#[tokio::test]
async fn a_call_refused_after_it_ran_leaves_no_output_and_no_allow_list_value() {
    let cap = "  echo:
    after:
      - assert: \"output.owner != 'evil'\"
        match: say
        error_message: Not yours.
";
    let script = "responses:
  - tool_calls:
      - {name: echo_say, arguments: {text: mine, owner: me}}
      - {name: echo_say, arguments: {text: theirs, owner: evil}}
  - text: done
";
    let h = harness(&agent(cap), script);
    let task = h.run("t/a", "go").await;
    let stats = &task.capabilities["echo_say"];
    assert_eq!((stats.count_successful, stats.count_restricted), (1, 1));
    assert!(
        stats.outputs[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("Not yours.")),
        "the refused call's output is kept: {:?}",
        stats.outputs
    );
    assert_eq!(stats.outputs[1], json!({"owner": "me", "text": "mine"}));
    assert_eq!(
        task.allow_lists["t/echo"]["owner"]
            .iter()
            .collect::<Vec<_>>(),
        ["me"],
        "the refused call's value joined the allow list"
    );
}

#[tokio::test]
async fn include_hides_actions() {
    let h = harness(
        &agent("  echo:\n    include: [shout]\n"),
        "responses:\n  - text: ok\n",
    );
    let task = h.run("t/a", "go").await;
    assert_eq!(
        functions(&h.events(&task)),
        ["echo_shout", "request_wakeup", "cancel_wakeup"]
    );
}

#[tokio::test]
async fn failed_assert_blocks_with_the_interpolated_message_and_counts_restricted() {
    let cap = "  echo:
    before:
      - assert: \"input.text != 'hi'\"
        error_message: \"No greetings for {context.user.id}, text was {input.text}.\"
";
    let h = harness(&agent(cap), SAY_EVIL);
    let task = h.run("t/a", "go").await;
    assert_eq!(
        observations(&h.events(&task)),
        [json!({"rejected": "No greetings for user:alice@example.com, text was hi."})]
    );
    let stats = &task.capabilities["echo_say"];
    assert_eq!((stats.count_restricted, stats.count_successful), (1, 0));
    assert_eq!(task.status(), Status::Idle);
}

#[tokio::test]
async fn steps_see_the_variables_they_read_only_in_a_condition_or_message() {
    // `now` and `event` appear only in the condition, `i` only in the message, `output` only
    // in an after step's message: each must be bound for the step to block as written.
    let cap = "  echo:
    after:
      - assert: \"false\"
        condition: \"size(now) > 0 && event == null\"
        error_message: \"{i.text} became {output.text}, not {o.owner}.\"
";
    let h = harness(&agent(cap), SAY_EVIL);
    let task = h.run("t/a", "go").await;
    assert_eq!(
        observations(&h.events(&task)),
        [json!({"rejected": "hi became hi, not evil."})]
    );
}

#[tokio::test]
async fn lock_task_terminates_and_continue_goes_on() {
    let locked = "  echo:\n    before:\n      - assert: \"false\"\n        on_fail: lock_task\n";
    let h = harness(&agent(locked), SAY_EVIL);
    let task = h.run("t/a", "go").await;
    assert_eq!(
        (task.status(), task.reason),
        (Status::Terminated, Some(Reason::Locked))
    );

    let cont = "  echo:\n    before:\n      - assert: \"false\"\n        on_fail: continue\n";
    let h = harness(&agent(cont), SAY_EVIL);
    let task = h.run("t/a", "go").await;
    assert_eq!(task.status(), Status::Idle);
    assert_eq!(task.capabilities["echo_say"].count_successful, 1);
}

#[tokio::test]
async fn transform_changes_what_the_llm_sees_but_not_the_recorded_output() {
    let cap = "  echo:\n    after:\n      - transform: \"output.put('_note', 'checked')\"\n";
    let h = harness(&agent(cap), SAY_EVIL);
    let task = h.run("t/a", "go").await;
    assert_eq!(
        observations(&h.events(&task)),
        [json!({"owner": "evil", "text": "hi", "_note": "checked"})]
    );
    assert_eq!(
        task.capabilities["echo_say"].outputs[0],
        json!({"owner": "evil", "text": "hi"})
    );
}

#[tokio::test]
async fn before_first_stays_shut_until_a_call_passes_it() {
    // The gate refuses `a`: refused calls leave it in place (calling again is no way round
    // it); once a call passes and runs, it asks no more.
    let cap = "  echo:\n    before_first:\n      - assert: \"input.text != 'a'\"\n        error_message: first\n";
    let script = "responses:
  - tool_calls: [{name: echo_say, arguments: {text: a}}]
  - tool_calls: [{name: echo_say, arguments: {text: a}}]
  - tool_calls: [{name: echo_say, arguments: {text: b}}]
  - tool_calls: [{name: echo_say, arguments: {text: a}}]
  - text: done
";
    let h = harness(&agent(cap), script);
    let task = h.run("t/a", "go").await;
    assert_eq!(
        observations(&h.events(&task)),
        [
            json!({"rejected": "first"}),
            json!({"rejected": "first"}),
            json!({"owner": "nobody", "text": "b"}),
            json!({"owner": "nobody", "text": "a"})
        ]
    );
}

#[tokio::test]
async fn guardrail_blocks_oversized_input() {
    let manifests = format!(
        "{}guardrails:\n  before:\n    - assert: \"size(input.message[0].text) < 10\"\n      error_message: Input too large.\n",
        agent("  echo: \"*\"\n")
    );
    let h = harness(&manifests, "responses:\n  - text: ok\n");
    let small = h.run("t/a", "short").await;
    assert_eq!(small.status(), Status::Idle);
    let big = h.run("t/a", "far too long for the guardrail").await;
    assert_eq!(
        (big.status(), big.reason),
        (Status::Terminated, Some(Reason::Locked))
    );
    assert_eq!(big.llm_calls, 0);
}

#[tokio::test]
async fn exposes_appear_in_the_output() {
    let manifests = format!(
        "{}exposes:\n  says: \"context.capabilities.echo_say.count_successful\"\n  first: \"output.message[0].text\"\n",
        agent("  echo: \"*\"\n")
    );
    let h = harness(&manifests, SAY_EVIL);
    let task = h.run("t/a", "go").await;
    let (exposes, output) = h
        .engine
        .read_task(&task.id, |r, _| (json!(r.exposes), json!(r.outputs)))
        .unwrap();
    assert_eq!(exposes, json!({"says": 1, "first": "done"}));
    assert_eq!(output[0]["says"], json!(1));
}

/// An agent `t/boss` on the scripted model (`script.yaml`) with the `capabilities:` lines
/// `capabilities`.
fn boss(capabilities: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/agent
namespace: t
name: boss
description: Delegates.
prompt: Delegate.
model: scripted/script.yaml
capabilities:
{capabilities}"
    )
}

/// `t/boss`, whose LLM delegates to `t/researcher` once (which answers `found it`).
fn delegating() -> Harness {
    let manifests = format!("{}---\n{RESEARCHER}", boss("  researcher: \"*\"\n"));
    let parent = "responses:\n  - tool_calls: [{name: researcher, arguments: {message: find it}}]\n  - text: parent done\n";
    harness_with(
        &manifests,
        &[
            ("script.yaml", parent),
            ("child.yaml", "responses:\n  - text: found it\n"),
        ],
    )
}

/// `t/boss` run once, delegating to `t/researcher`: the harness, the parent's record and its
/// child's id.
async fn delegated_once() -> (Harness, Arc<TaskRecord>, String) {
    let h = delegating();
    let task = h.run("t/boss", "go").await;
    let child = task.capabilities["researcher"].task_ids.as_ref().unwrap()[0].clone();
    (h, task, child)
}

#[tokio::test]
async fn a_delegated_agents_answer_returns_to_the_parent() {
    let (h, task, child) = delegated_once().await;
    assert_eq!(observations(&h.events(&task)), [json!("found it")]);
    let child = h.engine.task(&child).unwrap();
    assert_eq!(child.parent.as_deref(), Some(task.id.as_str()));
    assert_eq!(task.delegation_count, 1);
}

#[tokio::test]
async fn deleting_a_parent_deletes_the_children_it_delegated_to() {
    let (h, task, child) = delegated_once().await;
    assert_eq!(h.engine.task(&child).unwrap().status(), Status::Idle);
    h.engine.delete_task(&task.id).await.unwrap();
    let child = h.engine.task(&child).unwrap();
    assert_eq!(child.status(), Status::Terminated, "{child:?}");
    assert_eq!(child.reason, Some(Reason::Deleted), "{child:?}");
    assert!(child.subscriptions.is_empty(), "{child:?}");
}

#[tokio::test]
async fn a_client_sessions_end_deletes_the_children_its_calls_delegated_to() {
    let h = delegating();
    let user = UserRef {
        id: "user:alice".into(),
        email: None,
    };
    let session = h
        .engine
        .open_session("t/boss", user, json!({}))
        .await
        .unwrap();
    let called = h
        .engine
        .call_direct(
            &session.id,
            "researcher",
            json!({"message": "find it"}),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert!(matches!(called, DirectEnd::Observation(_)), "{called:?}");
    let record = h.engine.task(&session.id).unwrap();
    let child = record.capabilities["researcher"].task_ids.as_ref().unwrap()[0].clone();
    assert_eq!(h.engine.task(&child).unwrap().status(), Status::Idle);
    h.engine.close_session(&session.id).await.unwrap();
    let child = h.engine.task(&child).unwrap();
    assert_eq!(child.reason, Some(Reason::Deleted), "{child:?}");
}

/// The LLM is offered `message` alone when it delegates: another argument cannot set a
/// parameter of the agent it calls (only the capability's bindings set those).
#[tokio::test]
async fn a_delegation_passes_the_child_only_its_message_and_bindings() {
    let boss = boss("  refunder:\n    bindings: {region: \"'eu'\"}\n");
    let manifests = boss
        + "---
kind: commonagents.info/v1beta2/agent
namespace: t
name: refunder
description: Refunds.
prompt: Refund.
model: scripted/child.yaml
parameters:
  type: object
  properties:
    account: {type: string, default: own}
    region: {type: string}
";
    let parent = "responses:
  - tool_calls: [{name: refunder, arguments: {message: refund it, account: victim, region: us}}]
  - text: parent done
";
    let h = harness_with(
        &manifests,
        &[
            ("script.yaml", parent),
            ("child.yaml", "responses:\n  - text: refunded\n"),
        ],
    );
    let task = h.run("t/boss", "go").await;
    let child = &task.capabilities["refunder"].task_ids.as_ref().unwrap()[0];
    let child = h.engine.task(child).unwrap();
    let input = &child.inputs[0];
    assert_eq!(
        input["account"], "own",
        "the LLM set a hidden parameter: {input}"
    );
    assert_eq!(input["region"], "eu", "{input}");
}

#[tokio::test]
async fn mount_write_then_read_round_trips_and_parent_paths_and_links_are_refused() {
    let manifests = "kind: commonagents.info/v1beta2/tool
namespace: t
name: memory
description: Remembers.
actions:
  - name: write
    description: Write.
    parameters: {type: object, properties: {key: {type: string}, value: {type: string}}}
    execute:
      cel: {expression: \"mount.write('_memory/' + input.key, input.value)\"}
  - name: read
    description: Read.
    parameters: {type: object, properties: {key: {type: string}}}
    execute:
      cel: {expression: \"mount.read('_memory/' + input.key)\"}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Remembers things.
prompt: Remember.
model: scripted/script.yaml
mount: agent
capabilities:
  memory: \"*\"
";
    let script = "responses:
  - tool_calls: [{name: memory_write, arguments: {key: k, value: remembered}}]
  - tool_calls: [{name: memory_read, arguments: {key: k}}]
  - tool_calls: [{name: memory_read, arguments: {key: ../../escape}}]
  - tool_calls: [{name: memory_read, arguments: {key: out/secret}}]
  - tool_calls: [{name: memory_write, arguments: {key: out/planted, value: x}}]
  - text: done
";
    let h = harness(manifests, script);
    // A directory in the mount that is a symbolic link to one outside it (as a component
    // with the mount, or another process, could make): neither read nor written through.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "outside").unwrap();
    let memory = h.dir.path().join("data/mounts/t/a/_memory");
    std::fs::create_dir_all(&memory).unwrap();
    std::os::unix::fs::symlink(outside.path(), memory.join("out")).unwrap();
    let task = h.run("t/a", "go").await;
    let obs = observations(&h.events(&task));
    assert_eq!(obs[0], json!("remembered"));
    assert_eq!(obs[1], json!("remembered"));
    assert!(
        obs[2]["error"]
            .as_str()
            .unwrap()
            .contains("`..` is not allowed"),
        "{}",
        obs[2]
    );
    for o in &obs[3..5] {
        assert!(
            o["error"]
                .as_str()
                .is_some_and(|e| e.contains("symbolic links are not followed")),
            "{o}"
        );
    }
    assert!(!outside.path().join("planted").exists());
    let file = memory.join("k");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "remembered");
}

#[tokio::test]
async fn without_a_scheduler_the_wakeup_tools_refuse_and_keep_nothing() {
    // No `Triggers` is hooked to this engine: nothing would ever fire a wakeup, so the tool
    // must say so rather than answer as if one were kept.
    let h = harness(
        SCRIPTED_AGENT,
        "responses:
  - tool_calls:
      - {name: request_wakeup, arguments: {when: {kind: delay_ms, value: 1000}, prompt: w, reason: r}}
  - text: ok
",
    );
    let task = h.run("t/a", "go").await;
    let events = h.events(&task);
    // A failed host tool is a recoverable error result: the LLM is told why.
    let results: Vec<&serde_json::Value> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ObservationEvent {
                tool_name, result, ..
            } if tool_name == "request_wakeup" => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{events:?}");
    let error = results[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("runs no scheduler"), "{}", results[0]);
    assert!(
        results[0].get("schedule_id").is_none(),
        "the tool answered as if a wakeup were kept: {}",
        results[0]
    );
    let kept: Vec<(String, serde_json::Value)> =
        agentmesh_store::Typed::states(h.engine.store(), "wakeup").unwrap();
    assert!(kept.is_empty(), "{kept:?}");
}

/// A fatal failure ends the task (CONTRACT §5), in an `invoke` step as in a call: whatever
/// the step's `on_fail` says, the guarded call does not run.
#[tokio::test]
async fn a_fatal_failure_of_an_invoked_tool_ends_the_task() {
    let broken = "kind: commonagents.info/v1beta2/tool
namespace: t
name: broken
description: Misconfigured.
actions:
  - name: go
    description: Go.
    execute:
      stateless_http: {method: GET, url: \"not a url\"}
---
";
    let steps = "  echo:\n    before:\n      - invoke: \"broken:go\"\n        on_fail: continue\n";
    let manifests = format!("{broken}{}", agent(steps));
    let script = "responses:
  - tool_calls: [{name: echo_say, arguments: {text: hi}}]
  - text: done
";
    let h = harness(&manifests, script);
    let task = h.run("t/a", "go").await;
    assert_eq!(task.status(), Status::Terminated, "{task:?}");
    assert_eq!(task.reason, Some(Reason::Locked), "{task:?}");
    assert_eq!(task.capabilities["echo_say"].count_successful, 0);
}
