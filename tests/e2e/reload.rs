//! Hot reload of the config dir: replacing a component changes behaviour without a restart;
//! replacing it with garbage, or with a component of another world, keeps the last good
//! version and reports why.

use std::time::{Duration, Instant};

use agentmesh_testkit::fixtures::{dirs, scripted_agent};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::completion;
use crate::wasm::{gh_tool, guest, probe_tool};

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
/// The generation of the config `server` runs.
fn generation(server: &Server) -> Option<u64> {
    server.request("GET", "/v1/status").send().json()["reload"]["generation"].as_u64()
}

/// Waits until `server` runs a config newer than generation `before`.
fn reloaded_after(server: &Server, before: Option<u64>) {
    let reloaded = wait_for(Duration::from_secs(10), || {
        generation(server).filter(|g| Some(*g) > before)
    });
    assert!(reloaded.is_some(), "the change is never reloaded");
}

/// The results of task `id`'s observations, once it has at least `n`.
fn observations(server: &Server, id: &str, n: usize) -> Vec<Value> {
    wait_for(Duration::from_secs(60), || {
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
}

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
    let before = generation(&server);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    let observations = |n: usize| observations(&server, &id, n);
    let first = observations(1);
    assert!(
        first[0].to_string().contains("in the mount"),
        "the mount is the session's: {first:?}"
    );

    // The agent loses its mount; the task's next call runs in its open tool session.
    std::fs::write(dir.join("all.yaml"), probing_agent("none")).unwrap();
    reloaded_after(&server, before);
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

/// Tools of three runtimes that keep a session per task, each given a setting when it opens:
/// `t/gh` (the `github_pr` component, its `token`), `t/crm` (a stateful HTTP session whose
/// create sends `X-Key: {settings.key}`) against the stand-in at `port`, and `t/py` (the
/// Python MCP server over stdio, `MARK` in its environment); then agent `t/a` over them.
fn session_tools(port: u16) -> String {
    let py = format!(
        "transport: stdio, command: \"{}\", args: [\"{}\", stdio], env: {{MARK: \"{{settings.mark}}\"}}",
        crate::mcp_client::python(),
        crate::mcp_client::servers().join("server.py").display()
    );
    format!(
        "{}kind: commonagents.info/v1beta2/tool
namespace: t
name: crm
description: A session API.
settings: {{properties: {{key: {{type: string}}}}}}
stateful_session:
  create: {{method: POST, url: \"http://127.0.0.1:{port}/sessions\", headers: {{X-Key: \"{{settings.key}}\"}}}}
  extract: {{id: $.id}}
  destroy: {{method: DELETE, url: \"http://127.0.0.1:{port}/sessions/{{session.id}}\"}}
actions:
  - name: run
    description: Runs a query in the session.
    parameters: {{type: object, properties: {{q: {{type: string}}}}}}
    execute:
      stateful_session:
        execute: {{method: POST, url: \"http://127.0.0.1:{port}/sessions/{{session.id}}/run\", body: {{q: \"{{parameters.q}}\"}}}}
---
kind: commonagents.info/v1beta2/tool
namespace: t
name: py
description: The Python MCP server.
settings: {{properties: {{mark: {{type: string}}}}}}
mcp: {{{py}}}
actions:
  - {{name: whoami, description: Who answers., parameters: {{type: object, properties: {{}}}}, execute: {{mcp: {{}}}}}}
---
{}",
        gh_tool(port, "{type: string}"),
        scripted_agent("t/a", "capabilities: {gh: \"*\", crm: \"*\", py: \"*\"}\n"),
    )
}

/// The host config giving each of [`session_tools`] its setting, ending in `n`.
fn session_settings(n: &str) -> String {
    format!(
        "kind: agentmesh/v1/host\nsettings: {{t: {{gh: {{token: tok-{n}}}, crm: {{key: key-{n}}}, py: {{mark: mark-{n}}}}}}}\n"
    )
}

#[test]
fn a_settings_change_reaches_a_tasks_open_tool_sessions() {
    // The stand-in: GitHub's pull requests (answering with the bearer token they came with)
    // and a session API (`POST /sessions` makes `s-N`).
    let made = std::sync::atomic::AtomicUsize::new(0);
    let (port, received) = agentmesh_testkit::serve(20, move |r| {
        if r.request_line.starts_with("POST /sessions ") {
            let n = made.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            return ("201 Created", json!({"id": format!("s-{n}")}).to_string());
        }
        if let Some(rest) = r.request_line.strip_prefix("POST /sessions/") {
            let session = rest.split('/').next().unwrap_or_default();
            return ("200 OK", json!({"session": session}).to_string());
        }
        let auth = r.header("authorization").unwrap_or_default();
        (
            "201 Created",
            json!({"number": 7, "echo": auth}).to_string(),
        )
    });
    let calls = "  - tool_calls:
      - {name: gh, arguments: {owner: acme, repo: web, title: T, head: h}}
      - {name: crm, arguments: {q: x}}
      - {name: py, arguments: {}}
";
    let (_root, dir, data) = dirs(&[
        ("host.yaml", &session_settings("one")),
        ("all.yaml", &session_tools(port)),
        (
            "script.yaml",
            &format!("responses:\n{calls}  - text: one\n{calls}  - text: two\n"),
        ),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let before = generation(&server);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    // A turn's observations: the pull request's, the session's, the MCP server's.
    let turn = |n: usize| {
        let seen = observations(&server, &id, 3 * n);
        let of = |key: &str| {
            seen[3 * (n - 1)..3 * n]
                .iter()
                .find(|o| o.get(key).is_some())
                .cloned()
                .unwrap_or_else(|| panic!("no observation with `{key}`: {seen:?}"))
        };
        (of("echo"), of("session"), of("pid"))
    };
    let (gh, crm, py) = turn(1);
    assert_eq!(gh["echo"], "Bearer tok-one", "{gh}");
    assert_eq!(crm["session"], "s-1", "{crm}");
    assert_eq!(py["env"]["MARK"], "mark-one", "{py}");

    std::fs::write(dir.join("host.yaml"), session_settings("two")).unwrap();
    reloaded_after(&server, before);
    server.send_input(&id, "again");
    let (gh, crm, py_again) = turn(2);
    assert_eq!(
        gh["echo"], "Bearer tok-two",
        "the component's session: {gh}"
    );
    assert_eq!(crm["session"], "s-2", "the remote session: {crm}");
    assert_eq!(
        py_again["env"]["MARK"], "mark-two",
        "the MCP server: {py_again}"
    );
    assert_ne!(py_again["pid"], py["pid"], "a new server process");

    // The old remote session was destroyed, and the new one made with the new key.
    let requests: Vec<_> = received.try_iter().collect();
    let line = |prefix: &str| {
        requests
            .iter()
            .filter(|r| r.request_line.starts_with(prefix))
            .map(|r| r.header("x-key").unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(line("POST /sessions "), ["key-one", "key-two"]);
    assert_eq!(
        line("DELETE /sessions/s-1 ").len(),
        1,
        "the old session is destroyed"
    );
}
