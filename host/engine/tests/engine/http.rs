//! The `stateless_http` runtime against a server on loopback: templates, `response_path`,
//! which failures the LLM gets back and which end the task.

use std::time::Duration;

use agentmesh_engine::Status;
use serde_json::json;

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
