//! Hot reload of the config dir: replacing a component changes behaviour without a restart;
//! replacing it with garbage, or with a component of another world, keeps the last good
//! version and reports why.

use std::time::{Duration, Instant};

use agentmesh_testkit::fixtures::{dirs, scripted_agent};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::completion;
use crate::wasm::{guest, probe_tool};

/// A tool `lab/box` running whatever component `box.wasm` is (the test copies it in).
const BOX: &str = "kind: commonagents.info/v1beta2/tool
namespace: lab
name: box
description: Whatever component is in box.wasm.
wasm:
  component: box.wasm
actions:
  - name: list
    description: List.
";

/// Runs a new task calling the box; returns the observation's result.
fn call_box(server: &Server) -> Value {
    let id = server.create_task(&json!({"agent": "lab/user", "input": {"message": "go"}}));
    server.wait_for_event(&id, "ObservationEvent")["result"].clone()
}

fn box_hash(server: &Server) -> Option<String> {
    let status = server.request("GET", "/v1/status").send().json();
    status["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "lab/box")
        .and_then(|c| c["hash"].as_str().map(str::to_owned))
}

#[test]
fn a_replaced_component_is_swapped_in_and_garbage_keeps_the_last_good_one() {
    let user = scripted_agent("lab/user", "capabilities:\n  box: \"*\"\n");
    let (_root, dir, data) = dirs(&[
        ("manifests.yaml", &format!("{BOX}---\n{user}")),
        (
            "script.yaml",
            "responses:\n  - tool_calls: [{name: box, arguments: {}}]\n  - text: done\n",
        ),
    ]);
    std::fs::copy(guest("notes"), dir.join("box.wasm")).unwrap();
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let v1 = box_hash(&server).expect("the component is loaded at start");
    assert_eq!(
        call_box(&server),
        json!({"keys": []}),
        "v1 is the notes tool"
    );

    // Replace it (write aside, then rename, as deployments do).
    std::fs::copy(guest("test_probe"), dir.join("box.wasm.new")).unwrap();
    std::fs::rename(dir.join("box.wasm.new"), dir.join("box.wasm")).unwrap();
    let replaced = Instant::now();
    let v2 = wait_for(Duration::from_secs(2), || {
        box_hash(&server).filter(|h| *h != v1)
    });
    assert!(v2.is_some(), "the new version is in force within 2 s");
    eprintln!("swapped in after {:?}", replaced.elapsed());
    let probe = call_box(&server);
    assert!(
        probe["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "v2 is the probe: {probe}"
    );

    // Garbage: the last good version stays, and the error shows in the status.
    std::fs::write(dir.join("box.wasm"), b"\0asm garbage").unwrap();
    let error = wait_for(Duration::from_secs(5), || {
        let status = server.request("GET", "/v1/status").send().json();
        status["reload"]["last_error"]["message"]
            .as_str()
            .map(str::to_owned)
    })
    .expect("the failed reload is reported");
    assert!(error.contains("box.wasm"), "{error}");
    assert_eq!(box_hash(&server), v2);
    let still = call_box(&server);
    assert!(
        still["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "the probe still answers: {still}"
    );

    // A component of another world (an event filter as the tool) is refused as well.
    std::fs::copy(guest("label_filter"), dir.join("box.wasm.new")).unwrap();
    std::fs::rename(dir.join("box.wasm.new"), dir.join("box.wasm")).unwrap();
    let error = wait_for(Duration::from_secs(5), || {
        let status = server.request("GET", "/v1/status").send().json();
        status["reload"]["last_error"]["message"]
            .as_str()
            .filter(|m| m.contains("event-filter-plugin"))
            .map(str::to_owned)
    })
    .expect("the refused reload is reported");
    assert!(error.contains("must implement `tool-plugin`"), "{error}");
    assert_eq!(box_hash(&server), v2);
}

/// The host config of the reload test: `openai` at `port` with the key in `key_var`, one
/// admin token read from `token_var`, and `extra` lines.
fn host(port: u16, key_var: &str, token_var: &str, extra: &str) -> String {
    format!(
        "kind: agentmesh/v1/host
models:
  openai: {{base_url: \"http://127.0.0.1:{port}/v1\", api_key: {{env: {key_var}}}}}
api_tokens:
  - {{subject: \"user:admin\", role: admin, env: {token_var}}}
{extra}"
    )
}

/// Runs a task of `agent` as `token`'s holder until it answers; returns the answer's text.
fn answer(server: &Server, token: &str, agent: &str, message: &str) -> String {
    let body = json!({"agent": agent, "input": {"message": message}});
    let id = server.create_task_as(token, &body);
    wait_for(Duration::from_secs(30), || {
        let task = server
            .request("GET", &format!("/v1/tasks/{id}"))
            .header("Authorization", &format!("Bearer {token}"))
            .send()
            .json();
        task["output"][0]["message"][0]["text"]
            .as_str()
            .map(str::to_owned)
    })
    .unwrap_or_else(|| panic!("task {id} never answered"))
}

#[test]
fn a_reload_applies_models_tokens_and_the_body_limit_and_names_what_needs_a_restart() {
    let (one, _) = agentmesh_testkit::serve(1, |_| ("200 OK", completion("from one")));
    let (two, asked) = agentmesh_testkit::serve(1, |_| ("200 OK", completion("from two")));
    let agents = format!(
        "kind: commonagents.info/v1beta2/agent
namespace: lab
name: chat
description: Chats over the endpoint.
prompt: Chat.
model: openai/fake
---
{}",
        scripted_agent("lab/scripted", "")
    );
    let limit = "policy: {max_body_bytes: 1KiB}\n";
    let (_root, dir, data) = dirs(&[
        ("agents.yaml", &agents),
        ("script.yaml", "responses:\n  - text: one\n"),
        ("host.yaml", &host(one, "KEY_ONE", "T_A", limit)),
    ]);
    let env = [
        ("T_A", "token-a"),
        ("T_B", "token-b"),
        ("KEY_ONE", "key-one-secret"),
        ("KEY_TWO", "key-two-secret"),
    ];
    let server = Server::start(AGENTMESH, &dir, &data, &env);
    assert_eq!(answer(&server, "token-a", "lab/chat", "hi"), "from one");
    assert_eq!(answer(&server, "token-a", "lab/scripted", "hi"), "one");
    let long = "x".repeat(2000);
    let r = server
        .request("POST", "/v1/tasks")
        .header("Authorization", "Bearer token-a")
        .json(&json!({"agent": "lab/scripted", "input": {"message": long}}))
        .send();
    assert_eq!(r.status, 413, "{}", r.text());

    // Another script, endpoint, key, token and body limit; and another address.
    std::fs::write(dir.join("script.yaml"), "responses:\n  - text: two\n").unwrap();
    let changed = "policy: {max_body_bytes: 4KiB}\nlisten: 127.0.0.1:9\n";
    std::fs::write(dir.join("host.yaml"), host(two, "KEY_TWO", "T_B", changed)).unwrap();
    let status = wait_for(Duration::from_secs(30), || {
        let r = server
            .request("GET", "/v1/status")
            .header("Authorization", "Bearer token-b")
            .send();
        (r.status == 200).then(|| r.json())
    })
    .expect("the new token is in force after the reload");
    assert_eq!(
        status["reload"]["restart_required"],
        json!(["listen"]),
        "{status}"
    );
    let r = server
        .request("GET", "/v1/tasks")
        .header("Authorization", "Bearer token-a")
        .send();
    assert_eq!(r.status, 401, "the removed token is refused: {}", r.text());
    assert_eq!(answer(&server, "token-b", "lab/scripted", "hi"), "two");
    assert_eq!(answer(&server, "token-b", "lab/chat", "hi"), "from two");
    let request = asked.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(
        request.header("authorization"),
        Some("Bearer key-two-secret"),
        "the new key is sent to the new endpoint"
    );
    assert_eq!(answer(&server, "token-b", "lab/scripted", &long), "two");
    let log = server.terminate_with_log();
    assert!(
        log.contains("`listen` changed: it applies at the next restart"),
        "{log}"
    );
}

/// `t/a`, whose one tool is the `test-probe` component, with the mount `scope`.
fn probing_agent(scope: &str) -> String {
    let agent = format!("mount: {scope}\ncapabilities: {{probe: \"*\"}}\n");
    format!("{}{}", probe_tool(), scripted_agent("t/a", &agent))
}

#[test]
fn a_mount_a_reload_takes_away_is_gone_from_a_tasks_open_tool_session() {
    let probe = "  - tool_calls: [{name: probe, arguments: {inside: /mount/note.txt}}]\n";
    let (_root, dir, data) = dirs(&[
        (
            "host.yaml",
            "kind: agentmesh/v1/host\nmount: {backend: file, root: files}\n",
        ),
        ("all.yaml", &probing_agent("agent")),
        (
            "script.yaml",
            &format!("responses:\n{probe}  - text: one\n{probe}  - text: two\n"),
        ),
    ]);
    std::fs::create_dir_all(dir.join("files/t/a")).unwrap();
    std::fs::write(dir.join("files/t/a/note.txt"), "in the mount").unwrap();
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let generation = |server: &Server| {
        server.request("GET", "/v1/status").send().json()["reload"]["generation"].as_u64()
    };
    let before = generation(&server);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    let observations = |n: usize| {
        wait_for(Duration::from_secs(30), || {
            let events = server
                .request("GET", &format!("/v1/tasks/{id}/events"))
                .send()
                .json();
            let seen: Vec<Value> = events["events"]
                .as_array()?
                .iter()
                .filter(|e| e["kind"] == "ObservationEvent")
                .map(|e| e["result"].clone())
                .collect();
            (seen.len() >= n).then_some(seen)
        })
        .unwrap_or_else(|| panic!("task {id} never made {n} calls"))
    };
    let first = observations(1);
    assert!(
        first[0].to_string().contains("in the mount"),
        "the mount is the session's: {first:?}"
    );

    // The agent loses its mount; the task's next call runs in its open tool session.
    std::fs::write(dir.join("all.yaml"), probing_agent("none")).unwrap();
    let reloaded = wait_for(Duration::from_secs(10), || {
        generation(&server).filter(|g| Some(*g) > before)
    });
    assert!(reloaded.is_some(), "the change is never reloaded");
    server.send_input(&id, "again");
    let second = &observations(2)[1];
    assert!(
        !second.to_string().contains("in the mount"),
        "the mount the reload took away is still the session's: {second}"
    );
    assert!(
        second
            .to_string()
            .contains(r#"\"what\":\"/mount/note.txt\"}"#),
        "the probe tried the read: {second}"
    );
}
