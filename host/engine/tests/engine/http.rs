//! The `stateless_http` runtime against a server on loopback: templates, `response_path`,
//! which failures the LLM gets back and which end the task.

use std::time::Duration;

use std::sync::Arc;

use agentmesh_engine::{Run, Status, TaskRecord};
use agentmesh_model::event::{Event, EventKind};
use serde_json::{Value, json};

use crate::util::{harness, observations};

/// A server answering up to `requests` requests: 404 with a JSON message for `/missing`,
/// else 201 with `{"data": {"id": 7, "got": BODY}}`.
fn server(requests: usize) -> (u16, std::sync::mpsc::Receiver<agentmesh_testkit::Request>) {
    agentmesh_testkit::serve(requests, |request| {
        if request.request_line.contains("/missing") {
            (
                "404 Not Found",
                json!({"message": "no such item"}).to_string(),
            )
        } else {
            let got: serde_json::Value = serde_json::from_str(&request.body).unwrap_or_default();
            (
                "201 Created",
                json!({"data": {"id": 7, "got": got}}).to_string(),
            )
        }
    })
}

fn manifests(port: u16) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: items
description: Items over HTTP.
actions:
  - name: create
    description: Create an item.
    parameters: {{type: object, properties: {{name: {{type: string}}, tag: {{type: string}}}}}}
    execute:
      stateless_http:
        method: POST
        url: \"http://127.0.0.1:{port}/items/{{parameters.name}}\"
        headers: {{X-Tag: \"{{parameters.tag}}\"}}
        body: {{name: \"{{parameters.name}}\", kind: widget}}
        response_path: $.data
  - name: missing
    description: Ask for what is not there.
    execute:
      stateless_http: {{method: GET, url: \"http://127.0.0.1:{port}/missing\"}}
  - name: down
    description: Call a server that is not running.
    execute:
      stateless_http: {{method: GET, url: \"http://127.0.0.1:1/down\"}}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Uses items.
prompt: Go.
model: scripted/script.yaml
capabilities:
  items: \"*\"
"
    )
}

#[tokio::test]
async fn a_request_is_built_from_its_templates_and_failures_are_classified() {
    let (port, received) = server(3);
    let script = "responses:
  - tool_calls: [{name: items_create, arguments: {name: bolt, tag: blue}}]
  - tool_calls: [{name: items_missing, arguments: {}}]
  - tool_calls: [{name: items_create, arguments: {name: nut, tag: \"a\\nb\"}}]
  - tool_calls: [{name: items_down, arguments: {}}]
  - text: done
";
    let h = harness(&manifests(port), script);
    let task = h.run("t/a", "go").await;
    let obs = observations(&h.events(&task));

    // 1. The templates filled in; `response_path` selects the result.
    let first = received.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(first.request_line, "POST /items/bolt HTTP/1.1");
    assert_eq!(first.header("x-tag"), Some("blue"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&first.body).unwrap(),
        json!({"name": "bolt", "kind": "widget"})
    );
    assert_eq!(
        obs[0],
        json!({"id": 7, "got": {"name": "bolt", "kind": "widget"}})
    );

    // 2. A 4xx is the LLM's to handle: the task goes on.
    let second = received.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(second.request_line, "GET /missing HTTP/1.1");
    let error = obs[1]["error"].as_str().unwrap();
    assert!(
        error.contains("HTTP 404") && error.contains("no such item"),
        "{error}"
    );

    // 3. A value that makes the request invalid (a line break in a header) is too; nothing
    // is sent.
    let error = obs[2]["error"].as_str().unwrap();
    assert!(error.contains("not a valid header value"), "{error}");

    // 4. An unreachable endpoint is an observation too: the task goes on to its answer.
    let error = obs[3]["error"].as_str().unwrap();
    assert!(error.contains("is unreachable"), "{error}");
    assert_eq!(task.status(), Status::Idle);
    assert_eq!(task.last_output_text().as_deref(), Some("done"));
    assert!(
        received.recv_timeout(Duration::from_millis(200)).is_err(),
        "only the valid requests reached the server"
    );
}

/// Runs a task of `t/a` making two calls of `items_create`; while the first waits at the
/// server, reloads the config as `reload` rewrites [`manifests`] (it may write files into the
/// config dir it is given). Returns the task, its results and how many requests reached the
/// server.
async fn reload_during_a_call(
    reload: impl FnOnce(&std::path::Path, String) -> String,
) -> (Arc<TaskRecord>, Vec<Value>, Vec<Event>, usize) {
    let (called, in_call) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    // Kept while the server runs (it stops once nobody receives its requests); they are
    // counted through `called`, sent before each is answered (a request reaches the channel
    // only after its answer, which may be after the turn has ended).
    let (port, _received) = agentmesh_testkit::serve(2, move |_| {
        let _ = called.send(());
        let _ = released
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10));
        ("201 Created", json!({"data": {"id": 7}}).to_string())
    });
    let script = "responses:
  - tool_calls: [{name: items_create, arguments: {name: one, tag: x}}]
  - tool_calls: [{name: items_create, arguments: {name: two, tag: x}}]
  - text: done
";
    let h = harness(&manifests(port), script);
    let engine = h.engine.clone();
    let runner = tokio::spawn(async move {
        let task = engine
            .create_task(
                agentmesh_testkit::engine::new_task("t/a", "go"),
                Run::Caller,
            )
            .await
            .unwrap();
        engine.run_until_idle(&task.id).await.unwrap()
    });
    let in_call = tokio::task::spawn_blocking(move || {
        in_call
            .recv_timeout(Duration::from_secs(10))
            .expect("the first call never reached the server");
        in_call
    })
    .await
    .unwrap();
    let manifests = reload(h.dir.path(), manifests(port));
    std::fs::write(h.dir.path().join("manifests.yaml"), &manifests).unwrap();
    if !manifests.contains("scripted/script.yaml") {
        // A script no agent names does not validate.
        std::fs::remove_file(h.dir.path().join("script.yaml")).unwrap();
    }
    let plan = agentmesh_testkit::engine::plan_at(h.dir.path());
    h.engine.reload(plan).await.unwrap();
    release.send(()).unwrap();
    let task = runner.await.unwrap();
    let events = h.events(&task);
    (
        task,
        observations(&events),
        events,
        1 + in_call.try_iter().count(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_takes_a_capability_away_reaches_the_running_turn() {
    let (task, obs, _, sent) =
        reload_during_a_call(|_, m| m.replace("capabilities:\n  items: \"*\"\n", "")).await;
    assert_eq!(task.status(), Status::Idle, "{:?}", task.status());
    assert_eq!(obs[0], json!({"id": 7}), "{obs:?}");
    assert!(
        obs[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no function `items_create`")),
        "{obs:?}"
    );
    assert_eq!(sent, 1, "the second call was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_the_agent_stops_its_running_turn() {
    let (task, obs, events, sent) = reload_during_a_call(|_, m| {
        let (tool, _agent) = m.split_once("---\n").unwrap();
        tool.to_owned()
    })
    .await;
    assert_eq!(task.status(), Status::Idle, "{:?}", task.status());
    assert_eq!(obs, [json!({"id": 7})]);
    assert_eq!(sent, 1, "the second call was sent");
    let stopped = events.iter().any(|e| {
        matches!(&e.kind, EventKind::AgentErrorEvent { error, .. }
            if error == "the turn stopped: agent `t/a` is no longer in the config")
    });
    assert!(stopped, "{events:?}");
    assert_eq!(task.llm_calls, 1, "the LLM was not asked again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_gives_the_agent_another_model_reaches_the_running_turn() {
    // The new model is known only to the new config: the turn's next LLM call is its.
    let (task, obs, _, sent) = reload_during_a_call(|dir, m| {
        let other = "responses:\n  - text: one\n  - text: from the new model\n";
        std::fs::write(dir.join("other.yaml"), other).unwrap();
        m.replace("scripted/script.yaml", "scripted/other.yaml")
    })
    .await;
    assert_eq!(task.status(), Status::Idle, "{:?}", task.reason);
    assert_eq!(obs, [json!({"id": 7})]);
    assert_eq!(sent, 1);
    assert_eq!(
        task.last_output_text().as_deref(),
        Some("from the new model")
    );
}
