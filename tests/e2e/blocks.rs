//! Shared runtime blocks: a tool's top-level `wasm:` or `stateless_http:` block is inherited
//! by each action's `execute` block field by field, and an action's own field wins.

use std::time::Duration;

use agentmesh_testkit::fixtures::{config_dir, scripted_agent};
use serde_json::json;

use crate::util::{agentmesh, events, observations, run_json};
use crate::wasm::{fake_github, guest};

/// An agent `t/a` of tool `tool` (see [`scripted_agent`]).
fn agent(tool: &str) -> String {
    scripted_agent("t/a", &format!("capabilities: {{{tool}: \"*\"}}\n"))
}

#[test]
fn an_empty_wasm_block_inherits_the_component_and_sandbox_and_own_fields_win() {
    let component = guest("github_pr");
    let (port, received) = fake_github(2);
    let origin = format!("http://127.0.0.1:{port}");
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: gh
description: Pull requests.
settings: {{type: object, properties: {{base_url: {{type: string, default: \"{origin}\"}}}}}}
wasm: {{component: {component}, allowed_hosts: [\"{origin}\"], timeout: 10s}}
actions:
  - {{name: create_pr, description: Open one., execute: {{wasm: {{}}}}}}
  - name: list_prs
    description: List them, with a sandbox of its own.
    execute: {{wasm: {{allowed_hosts: [\"http://127.0.0.1:9\"]}}}}
",
        component = component.display()
    );
    let script = "responses:
  - tool_calls: [{name: gh_create_pr, arguments: {owner: acme, repo: web, title: Inherited, head: fix}}]
  - tool_calls: [{name: gh_list_prs, arguments: {owner: acme, repo: web}}]
  - text: done
";
    let dir = config_dir(&[
        ("tool.yaml", &tool),
        ("agent.yaml", &agent("gh")),
        ("script.yaml", script),
    ]);
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");

    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    let request = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the inherited component made no request");
    assert_eq!(request.request_line, "POST /repos/acme/web/pulls HTTP/1.1");
    let obs = observations(&events(&data, &task));
    assert_eq!(obs[0]["number"], 42, "{obs:?}");
    // The action's own `allowed_hosts` replaced the shared one: the fake server is not in it,
    // so the second call's request never reached it (it would have answered).
    assert!(obs[1]["error"].is_string(), "{obs:?}");
    assert!(
        received.try_recv().is_err(),
        "list_prs reached a host it may not"
    );
}

#[test]
fn an_action_without_a_component_anywhere_is_a_validation_error() {
    let dir = config_dir(&[(
        "tool.yaml",
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: nothing
description: No component anywhere.
actions:
  - name: run
    description: Runs nothing.
    execute: {wasm: {timeout: 5s}}
",
    )]);
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("tool.yaml:8:") && out.contains("needs a `component`"),
        "{out}{err}"
    );
}

#[test]
fn an_http_action_inherits_the_shared_request_and_overrides_its_own_fields() {
    let (port, received) = agentmesh_testkit::serve(2, |r| {
        ("200 OK", json!({"path": r.request_line}).to_string())
    });
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: api
description: A REST API.
stateless_http:
  method: POST
  url: \"http://127.0.0.1:{port}/shared\"
  headers: {{x-shared: yes, x-both: shared}}
  response_path: $.path
actions:
  - name: inherit
    description: Everything shared.
    execute: {{stateless_http: {{}}}}
  - name: own
    description: Its own URL, method and header.
    execute:
      stateless_http:
        method: GET
        url: \"http://127.0.0.1:{port}/own\"
        headers: {{x-both: own}}
"
    );
    let script = "responses:
  - tool_calls: [{name: api_inherit, arguments: {}}]
  - tool_calls: [{name: api_own, arguments: {}}]
  - text: done
";
    let dir = config_dir(&[
        ("tool.yaml", &tool),
        ("agent.yaml", &agent("api")),
        ("script.yaml", script),
    ]);
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    let obs = observations(&events(&data, &task));
    assert_eq!(
        obs,
        [json!("POST /shared HTTP/1.1"), json!("GET /own HTTP/1.1")]
    );
    let shared = received.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(shared.header("x-shared"), Some("yes"));
    assert_eq!(shared.header("x-both"), Some("shared"));
    let own = received.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(own.header("x-shared"), Some("yes"));
    assert_eq!(own.header("x-both"), Some("own"));
}
