//! A tool implemented as a Wasm component, called by an agent run: the `github-pr` guest
//! makes a real HTTP request (through the host's filtered wasi-http) to a fake GitHub server
//! this test starts on loopback, and the observation carries its answer.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use agentmesh_testkit::fixtures::config_dir;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::json;

use crate::AGENTMESH;
use crate::capacity::metric;
use crate::util::{Env, agentmesh, events, first, observations, run_in, run_json};

pub fn guest(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("guests/target/wasm32-wasip2/release/{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: build the guests first with `cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml`",
        path.display()
    );
    path
}

/// A tool `t/gh` running the `github_pr` component against the API at `port` (its
/// `base_url`, the one host it may reach), its `token` setting of schema `token` (a YAML flow
/// map), then a `---` line.
pub fn gh_tool(port: u16, token: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: gh
description: Pull requests.
settings:
  type: object
  properties:
    token: {token}
    base_url: {{type: string, default: \"http://127.0.0.1:{port}\"}}
wasm: {{component: {component}, allowed_hosts: [\"http://127.0.0.1:{port}\"]}}
actions:
  - {{name: create_pr, description: Open one.}}
---
",
        component = guest("github_pr").display()
    )
}

/// A tool `t/NAME` run by `component` (`wasm_extra`: more of its `wasm:` map, e.g.
/// `, timeout: 5s`) with one action `ACTION`, and an agent `t/a` on `scripted/script.yaml`
/// whose `capabilities:` are `capabilities` (indented lines).
fn tool_and_agent(
    name: &str,
    component: &Path,
    wasm_extra: &str,
    action: &str,
    capabilities: &str,
) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: {name}
description: The tool under test.
wasm: {{component: {component}{wasm_extra}}}
actions:
  - name: {action}
    description: The action.
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Uses the tool.
prompt: Go.
model: scripted/script.yaml
capabilities:
{capabilities}",
        component = component.display()
    )
}

/// A config dir with `host` as `host.yaml`, a tool `t/spin` whose one action never returns
/// (the `loop` test program, stopped at its 3 s timeout) and an agent `t/a` that calls it once.
pub fn spinning_agent(host: &str) -> tempfile::TempDir {
    let manifests = tool_and_agent(
        "spin",
        &guest("test_loop"),
        ", timeout: 3s",
        "run",
        "  spin: \"*\"\n",
    );
    config_dir(&[
        ("host.yaml", host),
        ("all.yaml", &manifests),
        (
            "script.yaml",
            "responses:\n  - tool_calls: [{name: spin, arguments: {}}]\n  - text: done\n",
        ),
    ])
}

/// A fake GitHub API on 127.0.0.1 answering `requests` requests (a created pull request
/// with the title it was sent), then stopping.
pub fn fake_github(requests: usize) -> (u16, mpsc::Receiver<agentmesh_testkit::Request>) {
    agentmesh_testkit::serve(requests, |request| {
        let title = serde_json::from_str::<serde_json::Value>(&request.body)
            .ok()
            .and_then(|v| v["title"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let answer = serde_json::json!({"number": 42, "title": title, "state": "open",
            "html_url": "https://github.com/acme/web/pull/42"});
        ("201 Created", answer.to_string())
    })
}

#[test]
fn an_agent_calls_a_component_tool_that_makes_a_real_http_request() {
    let component = guest("github_pr");
    let (port, received) = fake_github(1);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("host.yaml"),
        format!(
            "kind: agentmesh/v1/host
settings:
  engineering:
    github-pr:
      base_url: http://127.0.0.1:{port}
      token: test-token
"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("tool.yaml"),
        format!(
            "kind: commonagents.info/v1beta2/tool
namespace: engineering
name: github-pr
description: Pull requests.
settings:
  type: object
  properties:
    token: {{type: string}}
    base_url: {{type: string}}
parameters:
  type: object
  properties:
    owner: {{type: string, require_binding: true}}
    repo: {{type: string, require_binding: true}}
wasm:
  component: {component}
  allowed_hosts: [\"http://127.0.0.1:{port}\"]
  memory_limit: 64MiB
  timeout: 10s
actions:
  - name: create_pr
    description: Open a pull request.
    parameters:
      type: object
      properties:
        title: {{type: string}}
        head: {{type: string}}
        base: {{type: string, default: main}}
        author: {{type: string}}
  - name: list_prs
    description: List pull requests.
",
            component = component.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "kind: commonagents.info/v1beta2/agent
namespace: engineering
name: coder
description: Opens pull requests.
prompt: You open pull requests.
model: scripted/script.yaml
capabilities:
  github-pr:
    bindings: {owner: \"'acme'\", repo: \"'web'\"}
",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "responses:
  - tool_calls:
      - {name: github_pr_create_pr, arguments: {title: Fix the flaky test, head: fix-flaky, author: alice}}
  - text: Opened.
",
    )
    .unwrap();
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "engineering/coder", "open it", &data, &[]);

    let request = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the component made no request");
    assert_eq!(request.request_line, "POST /repos/acme/web/pulls HTTP/1.1");
    assert_eq!(request.header("authorization"), Some("Bearer test-token"));
    let body: serde_json::Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(body["title"], "Fix the flaky test");
    assert_eq!(body["head"], "fix-flaky");

    let events = events(&data, &task);
    let observation = first(&events, "ObservationEvent");
    assert_eq!(observation["result"]["number"], 42, "{observation}");
    assert_eq!(observation["result"]["title"], "Fix the flaky test");
    // The allow list grew with the call's values; the bound ones stay sealed.
    assert_eq!(
        task["allow_list"]["engineering/github-pr"]["author"],
        serde_json::json!(["alice"])
    );
    assert_eq!(
        task["allow_list"]["engineering/github-pr"]["owner"],
        serde_json::json!(["acme"])
    );
}

#[test]
fn a_component_that_calls_a_host_not_allowed_is_a_recoverable_error() {
    let component = guest("test_forbidden_host");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        tool_and_agent(
            "sneaky",
            &component,
            ", timeout: 5s",
            "get",
            "  sneaky: \"*\"\n",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "responses:\n  - tool_calls: [{name: sneaky, arguments: {}}]\n  - text: it failed, as expected\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    let events = events(&data, &task);
    let observation = first(&events, "ObservationEvent");
    let error = observation["result"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("GET http://forbidden.example/ failed")
            && error.contains("the host refused"),
        "{observation}"
    );
}

/// A middleware component (`redact`) in an agent's capability: its `before` step denies a
/// call whose input carries a forbidden field; its `after` step replaces what the LLM sees.
#[test]
fn a_middleware_component_denies_and_replaces_in_an_agent_run() {
    let redact = guest("redact");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "kind: commonagents.info/v1beta2/tool
namespace: t
name: account
description: Account data.
actions:
  - name: fetch
    description: Fetch the account.
    execute:
      cel: {{expression: \"{{'user': 'alice', 'token': 's3cret'}}\"}}
  - name: login
    description: Log in.
    parameters: {{type: object, properties: {{password: {{type: string}}}}}}
    execute:
      cel: {{expression: \"{{'ok': true}}\"}}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Uses accounts.
prompt: Go.
model: scripted/script.yaml
capabilities:
  account:
    before:
      - wasm: {{component: {redact}, config: {{deny_fields: [password]}}}}
        error_message: Passwords never go to tools.
    after:
      - wasm: {{component: {redact}, config: {{fields: [token]}}}}
",
            redact = redact.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "responses:
  - tool_calls: [{name: account_fetch, arguments: {}}]
  - tool_calls: [{name: account_login, arguments: {password: hunter2}}]
  - text: done
",
    )
    .unwrap();
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    let events = events(&data, &task);
    let observation = first(&events, "ObservationEvent");
    assert_eq!(
        observation["result"],
        serde_json::json!({"user": "alice", "token": "[redacted]"})
    );
    let rejection = first(&events, "UserRejectObservation");
    assert_eq!(rejection["tool_name"], "account_login");
    assert_eq!(rejection["reason"], "Passwords never go to tools.");
}

/// The `notes` component keeps state with `kv`: it survives from one call to the next in a
/// task, and another task does not see it.
#[test]
fn component_key_value_is_kept_per_task() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "{notes}---
kind: commonagents.info/v1beta2/agent
namespace: t
name: writer
description: Writes then reads.
prompt: Go.
model: scripted/writer.yaml
capabilities:
  notes: \"*\"
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: reader
description: Only reads.
prompt: Go.
model: scripted/reader.yaml
capabilities:
  notes: \"*\"
",
            notes = notes_tool()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("writer.yaml"),
        "responses:
  - tool_calls: [{name: notes_put, arguments: {key: plan, value: ship it}}]
  - tool_calls: [{name: notes_get, arguments: {key: plan}}]
  - text: done
",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("reader.yaml"),
        "responses:\n  - tool_calls: [{name: notes_get, arguments: {key: plan}}]\n  - text: done\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let writer = run_json(dir.path(), "t/writer", "go", &data, &[]);
    let results: Vec<serde_json::Value> = events(&data, &writer)
        .into_iter()
        .filter(|e| e["kind"] == "ObservationEvent")
        .map(|e| e["result"].clone())
        .collect();
    assert_eq!(
        results[1],
        serde_json::json!({"key": "plan", "value": "ship it"})
    );
    let reader = run_json(dir.path(), "t/reader", "go", &data, &[]);
    let events = events(&data, &reader);
    assert_eq!(
        first(&events, "ObservationEvent")["result"],
        serde_json::json!({"key": "plan", "value": null})
    );
}

/// Deleting a task removes what its components kept for it in the store; another task's
/// entries stay.
#[test]
fn deleting_a_task_removes_what_its_components_kept() {
    let agent =
        agentmesh_testkit::fixtures::scripted_agent("t/writer", "capabilities: {notes: \"*\"}\n");
    let (_root, dir, data) = agentmesh_testkit::fixtures::dirs(&[
        ("all.yaml", &format!("{}---\n{agent}", notes_tool())),
        (
            "script.yaml",
            "responses:
  - tool_calls: [{name: notes_put, arguments: {key: plan, value: ship it}}]
  - text: done
",
        ),
    ]);
    let mut server = Server::start(AGENTMESH, &dir, &data, &[]);
    let [deleted, kept] = ["one", "two"].map(|message| {
        let id = server.create_task(&json!({"agent": "t/writer", "input": {"message": message}}));
        server.wait_answered(&id, Duration::from_secs(30), "a writer");
        id
    });
    let r = server
        .request("DELETE", &format!("/v1/tasks/{deleted}"))
        .send();
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(server.stop_within(Duration::from_secs(30)), Some(0));

    let store = agentmesh_store::open(&data).unwrap();
    let note = |task: &str| {
        store
            .kv_value(&format!("t/notes/{task}"), "note/plan")
            .unwrap()
    };
    assert_eq!(note(&kept).as_deref(), Some(&b"ship it"[..]));
    assert_eq!(
        note(&deleted),
        None,
        "the deleted task's note is still kept"
    );
}

/// The `actions:` of a tool run by the `notes` guest: `put {key, value}` and `get {key}`.
const NOTES_ACTIONS: &str = "  - name: put
    description: Store a note.
    parameters: {type: object, properties: {key: {type: string}, value: {type: string}}}
  - name: get
    description: Read a note.
    parameters: {type: object, properties: {key: {type: string}}}
";

/// The tool `t/probe`: the `test-probe` component, its one action `probe` (input `inside`: a
/// file to read, the positive control), then a `---` line.
pub fn probe_tool() -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: probe
description: Looks around its sandbox.
wasm: {{component: {}}}
actions:
  - name: probe
    description: Look.
    parameters: {{type: object, properties: {{inside: {{type: string}}}}}}
---
",
        guest("test_probe").display()
    )
}

/// The tool `t/notes`, run by the `notes` guest: `put {key, value}` and `get {key}`.
pub fn notes_tool() -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: notes
description: Notes.
wasm: {{component: {}}}
actions:
{NOTES_ACTIONS}",
        guest("notes").display()
    )
}

/// Tools `t/first` and `t/second`, both run by the one file `component`, each with the
/// `actions:` `actions`, and an agent `t/a` using both on `scripted/script.yaml`.
fn two_tools_one_component(component: &Path, actions: &str) -> String {
    let tool = |name: &str| {
        format!(
            "kind: commonagents.info/v1beta2/tool
namespace: t
name: {name}
description: One of two tools on one component.
wasm: {{component: {}}}
actions:
{actions}---
",
            component.display()
        )
    };
    format!(
        "{}{}kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Uses both tools.
prompt: Go.
model: scripted/script.yaml
capabilities:
  first: \"*\"
  second: \"*\"
",
        tool("first"),
        tool("second")
    )
}

/// Two tools on one component file are two tools: the second one's fault names it, not the
/// first, and each has its own `/metrics` series and `/v1/status` entry.
#[test]
fn tools_sharing_a_component_file_are_each_named_in_their_faults_and_metrics() {
    let component = guest("test_panic");
    let dir = config_dir(&[
        (
            "all.yaml",
            &two_tools_one_component(
                &component,
                "  - name: ok\n    description: Answer.\n  - name: boom\n    description: Panic.\n",
            ),
        ),
        (
            "script.yaml",
            "responses:
  - tool_calls: [{name: first_ok, arguments: {}}]
  - tool_calls: [{name: second_boom, arguments: {}}]
  - text: done
",
        ),
    ]);
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &[]);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    let turn = wait_for(Duration::from_secs(30), || {
        let results = crate::capacity::observations(&server, &id);
        (results.len() == 2).then_some(results)
    })
    .expect("two observations");
    assert_eq!(turn[0], json!("still alive"));
    let error = turn[1]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("component `t/second` panicked"),
        "the fault names the tool that faulted: {error}"
    );
    assert!(!error.contains("t/first"), "{error}");

    let metrics = server.request("GET", "/metrics").send().text();
    // Each tool has its own series: one call each, the second's failed.
    for (tool, errors) in [("t/first", 0.0), ("t/second", 1.0)] {
        let label = format!("component=\"{tool}\"");
        let counted = (
            metric(&metrics, "agentmesh_component_calls_total", &label),
            metric(&metrics, "agentmesh_component_errors_total", &label),
        );
        assert_eq!(counted, (1.0, errors), "{tool}\n{metrics}");
    }

    let status = server.request("GET", "/v1/status").send().json();
    let names: Vec<&str> = status["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["t/first", "t/second"], "{status}");
}

/// Two tools on one component file keep key-value entries apart: what one stores in a task,
/// the other does not see.
#[test]
fn tools_sharing_a_component_file_keep_their_key_value_apart() {
    let dir = config_dir(&[
        (
            "all.yaml",
            &two_tools_one_component(&guest("notes"), NOTES_ACTIONS),
        ),
        (
            "script.yaml",
            "responses:
  - tool_calls: [{name: first_put, arguments: {key: plan, value: ship it}}]
  - tool_calls: [{name: second_get, arguments: {key: plan}}]
  - tool_calls: [{name: first_get, arguments: {key: plan}}]
  - text: done
",
        ),
    ]);
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    let results = observations(&events(&data, &task));
    assert_eq!(
        results[1..],
        [
            json!({"key": "plan", "value": null}),
            json!({"key": "plan", "value": "ship it"})
        ],
        "{results:?}"
    );
}

/// A component of the wrong world is refused where it is referenced, by `validate` and before
/// `run` starts a task: an event filter as a tool, a tool as a middleware step.
#[test]
fn a_component_of_the_wrong_world_is_refused_before_any_task_runs() {
    let dir = tempfile::tempdir().unwrap();
    let notes = guest("notes");
    let before = format!(
        "  notes:\n    before:\n      - wasm: {{component: {}}}\n",
        notes.display()
    );
    std::fs::write(
        dir.path().join("all.yaml"),
        tool_and_agent("notes", &guest("label_filter"), "", "put", &before),
    )
    .unwrap();
    std::fs::write(dir.path().join("script.yaml"), "responses: []\n").unwrap();
    let config = dir.path().to_str().unwrap();
    let (code, out, err) = agentmesh(&["validate", config]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("implements `event-filter-plugin`; here it must implement `tool-plugin`"),
        "{out}"
    );
    assert!(
        out.contains("implements `tool-plugin`; here it must implement `middleware-plugin`"),
        "{out}"
    );
    assert!(out.contains("all.yaml:5:"), "{out}");

    let data = dir.path().join("data");
    let (code, _, err) = run_in(&Env::default(), dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("here it must implement `tool-plugin`"),
        "{err}"
    );
    assert!(!data.join("store").exists(), "no task was started");
}

/// What a guest printed on stderr before it failed is in the task's error observation: the
/// lines before a panic, the last lines before another trap (an abort).
#[test]
fn a_guests_stderr_before_a_fault_reaches_the_error_observation() {
    let tool = |name: &str| {
        tool_and_agent(name, &guest("test_panic"), "", name, "")
            .split("---")
            .next()
            .unwrap()
            .to_owned()
    };
    let manifests = format!(
        "{}---\n{}---\nkind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Uses the tools.
prompt: Go.
model: scripted/script.yaml
capabilities:
  boom: \"*\"
  abort: \"*\"
",
        tool("boom"),
        tool("abort")
    );
    let dir = config_dir(&[
        ("all.yaml", &manifests),
        (
            "script.yaml",
            "responses:
  - tool_calls: [{name: boom, arguments: {}}]
  - tool_calls: [{name: abort, arguments: {}}]
  - text: done
",
        ),
    ]);
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    let seen = observations(&events(&data, &task));
    let errors: Vec<&str> = seen
        .iter()
        .map(|o| o["error"].as_str().unwrap_or_default())
        .collect();
    for said in [
        "component `t/boom` panicked: panicked at ",
        ": test-panic panics on purpose in `boom`; its stderr before:\ntest-panic: step 1 of 2 done",
    ] {
        assert!(errors[0].contains(said), "no `{said}` in {}", errors[0]);
    }
    // Whole lines only: not the start of the panic's own line.
    assert!(!errors[0].contains("thread '"), "{}", errors[0]);
    assert!(
        errors[1].contains(
            "component `t/abort` trapped: wasm trap: wasm `unreachable` instruction executed; its stderr ended with:\ntest-panic: step 1 of 2 done\ntest-panic: giving up on `abort`"
        ),
        "{}",
        errors[1]
    );
}
