//! Inputs, queues, the event log and re-opening a task from the same data dir.

use agentmesh_engine::{Origin, Run, Status};
use agentmesh_llm::{ChatMessage, estimate_prompt_tokens};
use agentmesh_model::event::{EventKind, EventSource};
use agentmesh_store::Typed;
use serde_json::json;

use crate::util::{RESEARCHER, echo_agent, engine_at, harness, observations};

fn agent() -> String {
    echo_agent(
        "parameters:
  type: object
  properties:
    ticket: {type: string}
    priority: {type: string, default: low}
capabilities:
  echo: \"*\"
",
    )
}

/// A scripted response that calls two tools at once.
const TWO_CALLS_AT_ONCE: &str = "  - text: Both at once.
    tool_calls:
      - {name: echo_say, arguments: {text: one}}
      - {name: echo_shout, arguments: {text: two}}
";

/// The input each test's first turn takes.
fn go() -> serde_json::Value {
    json!({"message": "go", "ticket": "T-1"})
}

#[tokio::test]
async fn a_parallel_tool_call_response_becomes_one_assistant_message() {
    let script = format!("responses:\n{TWO_CALLS_AT_ONCE}  - text: done\n");
    let h = harness(&agent(), &script);
    let task = h.run_input("t/a", go()).await;
    let events = h.events(&task);
    assert_eq!(observations(&events).len(), 2);
    let messages = agentmesh_llm::to_messages(&events);
    let assistants: Vec<&ChatMessage> = messages
        .iter()
        .filter(
            |m| matches!(m, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty()),
        )
        .collect();
    assert_eq!(assistants.len(), 1);
    let ChatMessage::Assistant {
        content,
        tool_calls,
    } = assistants[0]
    else {
        unreachable!()
    };
    assert_eq!(content.as_deref(), Some("Both at once."));
    assert_eq!(tool_calls.len(), 2);
    // Both ActionEvents share the response id; only the first carries the thought.
    let actions: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ActionEvent {
                llm_response_id,
                thought,
                ..
            } => Some((llm_response_id.clone(), thought.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(actions[0].0, actions[1].0);
    assert_eq!(
        (actions[0].1.as_str(), actions[1].1.as_str()),
        ("Both at once.", "")
    );
}

#[tokio::test]
async fn estimated_prompt_tokens_count_each_requests_whole_conversation() {
    // No usage in the script: every request's prompt tokens are estimated, from the
    // conversation the task keeps as its log grows, turn after turn.
    let script = format!(
        "responses:
{TWO_CALLS_AT_ONCE}  - tool_calls: [{{name: echo_say, arguments: {{text: three}}}}]
  - text: done
  - tool_calls: [{{name: echo_say, arguments: {{text: four is a longer argument}}}}]
  - text: done again
"
    );
    let h = harness(&agent(), &script);
    let first = h.run_input("t/a", go()).await;
    let input = json!({"message": "more please", "ticket": "T-1"});
    let queued = h.engine.submit(&first.id, input, Origin::User, Run::Caller);
    queued.await.unwrap();
    let task = h.engine.run_until_idle(&first.id).await.unwrap();
    let events = h.events(&task);
    // Each request saw the log up to the first event of its response: an `ActionEvent` of a
    // new response, or the agent's answer.
    let mut previous = None;
    let mut expected = 0;
    for (i, event) in events.iter().enumerate() {
        let starts = match &event.kind {
            EventKind::ActionEvent {
                llm_response_id, ..
            } => previous.replace(llm_response_id) != Some(llm_response_id),
            EventKind::MessageEvent { .. } => event.source == EventSource::Agent,
            _ => false,
        };
        if starts {
            expected += estimate_prompt_tokens(&agentmesh_llm::to_messages(&events[..i]));
        }
    }
    assert_eq!(task.llm_calls, 5);
    assert_eq!(task.prompt_tokens, expected);
}

#[tokio::test]
async fn parameters_get_defaults_and_required_ones_are_enforced() {
    let h = harness(&agent(), "responses:\n  - text: ok\n");
    let task = h.run_input("t/a", go()).await;
    assert_eq!(task.inputs[0]["priority"], "low");
    assert_eq!(
        task.inputs[0]["message"],
        json!([{"mimeType": "text/plain", "text": "go"}])
    );
    let missing = h
        .engine
        .create_task(
            agentmesh_engine::NewTask {
                agent: "t/a".into(),
                input: Some(json!({"message": "go"})),
                user: agentmesh_engine::UserRef::default(),
            },
            Run::Caller,
        )
        .await;
    assert!(missing.unwrap_err().to_string().contains("ticket"));
}

#[tokio::test]
async fn queued_inputs_are_processed_in_order() {
    let script = "responses:\n  - text: first\n  - text: second\n  - text: third\n";
    let h = harness(&agent(), script);
    let task = h
        .engine
        .create_task(
            agentmesh_engine::NewTask {
                agent: "t/a".into(),
                input: Some(json!({"message": "1", "ticket": "T"})),
                user: agentmesh_engine::UserRef::default(),
            },
            Run::Caller,
        )
        .await
        .unwrap();
    for message in ["2", "3"] {
        let input = json!({"message": message, "ticket": "T"});
        let queued = h.engine.submit(&task.id, input, Origin::User, Run::Caller);
        queued.await.unwrap();
    }
    let done = h.engine.run_until_idle(&task.id).await.unwrap();
    let texts: Vec<String> = done
        .outputs
        .iter()
        .map(|o| o["message"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["first", "second", "third"]);
    let inputs: Vec<&str> = done
        .inputs
        .iter()
        .map(|i| i["message"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(inputs, ["1", "2", "3"]);
}

#[tokio::test]
async fn a_task_reopened_from_the_same_data_dir_continues_its_conversation() {
    let script = "responses:\n  - text: first answer\n  - text: second answer\n";
    let h = harness(&agent(), script);
    let task = h
        .run_input("t/a", json!({"message": "hello", "ticket": "T"}))
        .await;
    let id = task.id.clone();
    let dir = h.dir;
    drop(h.engine);
    // A new engine on the same config and data dir, as a restarted process would be.
    let engine = engine_at(dir.path());
    engine
        .submit(
            &id,
            json!({"message": "again", "ticket": "T"}),
            Origin::User,
            Run::Caller,
        )
        .await
        .unwrap();
    let task = engine.run_until_idle(&id).await.unwrap();
    assert_eq!(task.status(), Status::Idle);
    assert_eq!(task.last_output_text().as_deref(), Some("second answer"));
    let messages = agentmesh_llm::to_messages(&engine.events(&id, 0).unwrap());
    let users = messages
        .iter()
        .filter(|m| matches!(m, ChatMessage::User { .. }))
        .count();
    assert_eq!(
        users, 2,
        "both inputs are in the conversation: {messages:?}"
    );
}

/// The growing fields of a record (what the store keeps in parts), as JSON to compare.
fn growing(record: &agentmesh_engine::TaskRecord) -> serde_json::Value {
    json!({
        "history": record.history,
        "inputs": record.inputs,
        "outputs": record.outputs,
        "capabilities": record.capabilities,
        "invocations": record.invocations,
        "allow_lists": record.allow_lists,
    })
}

#[tokio::test]
async fn a_records_growing_fields_are_stored_in_parts_and_read_back_whole() {
    let manifests = echo_agent(&format!(
        "capabilities:
  echo:
    include: [\"*\"]
    before:
      - match: shout
        assert: \"input.text != 'no'\"
  researcher: \"*\"
---
{RESEARCHER}"
    ));
    let script = "responses:
  - tool_calls: [{name: echo_say, arguments: {text: one}}, {name: echo_shout, arguments: {text: 'no'}}]
  - text: first
  - tool_calls: [{name: researcher, arguments: {message: find it}}]
  - text: second
  - tool_calls: [{name: echo_say, arguments: {text: three}}]
  - text: third
  - tool_calls: [{name: echo_shout, arguments: {text: four}}]
  - text: fourth
";
    let child = "responses:\n  - text: found it\n";
    let h = crate::util::harness_with(
        &manifests,
        &[("script.yaml", script), ("child.yaml", child)],
    );
    let id = h.run("t/a", "1").await.id.clone();
    h.engine
        .submit(&id, json!({"message": "2"}), Origin::User, Run::Caller)
        .await
        .unwrap();
    let before = growing(&h.engine.run_until_idle(&id).await.unwrap());
    assert_eq!(before["capabilities"]["echo_shout"]["count_restricted"], 1);
    assert_eq!(
        before["allow_lists"]["t/echo"]["text"],
        json!(["one"]),
        "a refused call adds nothing"
    );
    assert_eq!(
        before["capabilities"]["researcher"]["task_ids"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let dir = h.dir;
    drop(h.engine);

    // Read back from the store: the same as the running engine had.
    let engine = engine_at(dir.path());
    assert_eq!(growing(&engine.task(&id).unwrap()), before);
    // And the task goes on from there.
    engine
        .submit(&id, json!({"message": "3"}), Origin::User, Run::Caller)
        .await
        .unwrap();
    let after = engine.run_until_idle(&id).await.unwrap();
    let say = &after.capabilities["echo_say"];
    assert_eq!(say.count_successful, 2);
    assert_eq!(say.inputs[0]["text"], "three", "newest first");
    assert_eq!(say.inputs[1]["text"], "one");
    assert_eq!(
        after.invocations,
        ["echo_say", "echo_shout", "researcher", "echo_say"]
    );
    assert_eq!(after.outputs.len(), 3);
    let after = growing(&after);
    drop(engine);

    // The record's JSON has none of the growing fields: they are in one part per write that
    // added to them.
    let store = agentmesh_store::open(&dir.path().join("data")).unwrap();
    let head: serde_json::Value = store.task(&id).unwrap().unwrap();
    for field in [
        "history",
        "inputs",
        "outputs",
        "capabilities",
        "invocations",
        "allow_lists",
    ] {
        assert!(head.get(field).is_none(), "{field} in the record: {head}");
    }
    let (_, parts) = store
        .task_with_parts::<serde_json::Value, serde_json::Value>(&id)
        .unwrap()
        .unwrap();
    // Turns 1 and 3 wrote once; turn 2 also wrote before it delegated.
    assert_eq!(
        parts.parts.len(),
        4,
        "one part per write: {:?}",
        parts.parts
    );

    // A record written whole (as before parts existed) reads as it is, and its next write
    // moves its growing fields into its first part.
    let mut whole = head.clone();
    for (field, value) in after.as_object().unwrap() {
        whole[field] = value.clone();
    }
    store.commit_buffered(&id, &whole, Vec::new()).unwrap();
    drop(store);
    let engine = engine_at(dir.path());
    assert_eq!(growing(&engine.task(&id).unwrap()), after);
    engine
        .submit(&id, json!({"message": "4"}), Origin::User, Run::Caller)
        .await
        .unwrap();
    let last = growing(&engine.run_until_idle(&id).await.unwrap());
    drop(engine);
    let store = agentmesh_store::open(&dir.path().join("data")).unwrap();
    let (_, parts) = store
        .task_with_parts::<serde_json::Value, serde_json::Value>(&id)
        .unwrap()
        .unwrap();
    assert_eq!(parts.parts.len(), 1);
    drop(store);
    let engine = engine_at(dir.path());
    let reread = growing(&engine.task(&id).unwrap());
    assert_eq!(reread, last);
    assert_eq!(reread["capabilities"]["echo_shout"]["count_successful"], 1);
    assert_eq!(reread["outputs"].as_array().unwrap().len(), 4);
    assert_eq!(
        reread["allow_lists"]["t/echo"]["text"],
        json!(["four", "one", "three"])
    );
}
