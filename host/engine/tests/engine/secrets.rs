//! The LLM is never sent a secret: an observation echoing a `format: password` setting is
//! logged, and so sent, with `***` in its place.

use serde_json::json;

use crate::util::harness_with;

#[tokio::test]
async fn the_conversation_sent_to_the_llm_holds_no_password_setting() {
    sent_without("s3cret-key-value").await;
}

#[tokio::test]
async fn a_password_setting_written_as_a_number_is_a_secret_too() {
    // Unquoted in YAML, it is a number; a template renders its digits all the same.
    sent_without("48151623162342").await;
}

/// Runs a task whose call echoes the `format: password` setting `key` (the host config's
/// `key`, unquoted), and checks the conversation holds `***` in its place.
async fn sent_without(key: &str) {
    let (port, _received) = agentmesh_testkit::serve(1, |r| {
        let auth = r.header("authorization").unwrap_or_default().to_owned();
        ("200 OK", json!({"echo": auth}).to_string())
    });
    let manifests = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: api
description: An API with a key.
settings: {{type: object, properties: {{key: {{type: string, format: password}}}}}}
actions:
  - name: call
    description: Call it.
    execute:
      stateless_http:
        url: \"http://127.0.0.1:{port}/x\"
        headers: {{Authorization: \"Bearer {{settings.key}}\"}}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Talks to the API for the test.
prompt: Use the API.
model: scripted/script.yaml
capabilities:
  api: \"*\"
"
    );
    let host = format!("kind: agentmesh/v1/host\nsettings: {{t: {{api: {{key: {key}}}}}}}\n");
    let h = harness_with(
        &manifests,
        &[
            ("host.yaml", host.as_str()),
            (
                "script.yaml",
                "responses:\n  - tool_calls: [{name: api, arguments: {}}]\n  - text: done\n",
            ),
        ],
    );
    let task = h.run("t/a", "go").await;
    let sent = serde_json::to_string(&h.engine.conversation(&task.id).unwrap()).unwrap();
    assert!(!sent.contains(key), "{sent}");
    assert!(sent.contains("Bearer ***"), "{sent}");
}
