//! MCP resource updates as tool events (`receive.subscription.resources` on an MCP tool) and
//! as an `mcp-event` trigger source, with a server built on the `mcp` Python package whose
//! resources are the files of a directory (`tests/mcp/watcher.py`): the host subscribes, the
//! test changes a file, the server notifies.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentmesh_testkit::fixtures::dirs;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::json;

use crate::AGENTMESH;
use crate::mcp_client::{python, servers};
use crate::util::{agentmesh, triggered_messages};

/// The tool `lab/files`: the watcher over `files` as its shared `mcp` server; its event
/// `changed` subscribes to `a.txt` and `b.txt` (URIs rendered from the `dir` setting), and
/// passes only for a task whose allow list holds the URI.
fn files_tool(files: &Path) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: lab
name: files
description: Files of a directory.
settings:
  type: object
  properties:
    dir: {{type: string}}
parameters:
  type: object
  properties:
    uri: {{type: string}}
mcp: {{transport: stdio, command: \"{python}\", args: [\"{watcher}\", \"{files}\"]}}
actions:
  - name: names
    description: The files' names.
    execute: {{mcp: {{}}}}
events:
  - name: changed
    message: \"changed {{event.payload.uri}}\"
    receive:
      subscription:
        resources: [\"file://{{settings.dir}}/a.txt\", \"file://{{settings.dir}}/b.txt\"]
        filter: \"event.payload.uri == parameters.uri\"
",
        python = python(),
        watcher = servers().join("watcher.py").display(),
        files = files.display(),
    )
}

/// `lab/watch` is bound to `a.txt`'s URI; the trigger `lab/on-b` cold-starts a `lab/fresh`
/// task for each update of `b.txt`.
fn agents_and_trigger(a_uri: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/agent
namespace: lab
name: watch
description: Watches a.txt.
prompt: Watch.
model: scripted/script.yaml
capabilities:
  files:
    bindings:
      uri: \"'{a_uri}'\"
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: fresh
description: Started by a change.
prompt: Look.
model: scripted/script.yaml
---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: on-b
agent: fresh
owner: \"user:ops\"
source:
  type: files
  before:
    - assert: \"event.payload.uri.endsWith('/b.txt')\"
message: \"new {{event.payload.uri}}\"
enabled: true
"
    )
}

fn host(files: &Path) -> String {
    format!(
        "kind: agentmesh/v1/host
settings:
  lab:
    files:
      dir: \"{}\"
sources:
  files: {{mcp: {{tool: lab/files, event: changed}}}}
",
        files.display()
    )
}

/// A config dir for [`files_tool`] and [`agents_and_trigger`], over a directory `files`
/// holding `a.txt` and `b.txt`.
struct Setup {
    root: tempfile::TempDir,
    files: PathBuf,
    a_uri: String,
    /// Kept for its lifetime: the config dir is removed when it drops.
    _config: tempfile::TempDir,
    dir: PathBuf,
    data: PathBuf,
}

fn setup() -> Setup {
    let root = tempfile::tempdir().unwrap();
    let files = root.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("a.txt"), "one").unwrap();
    std::fs::write(files.join("b.txt"), "one").unwrap();
    let a_uri = format!("file://{}/a.txt", files.display());
    let script = "responses:\n  - text: Seen.\n  - text: Seen.\n  - text: Seen.\n";
    let (config, dir, data) = dirs(&[
        ("files.yaml", &files_tool(&files)),
        ("agents.yaml", &agents_and_trigger(&a_uri)),
        ("host.yaml", &host(&files)),
        ("script.yaml", script),
    ]);
    Setup {
        root,
        files,
        a_uri,
        _config: config,
        dir,
        data,
    }
}

/// The user messages of task `id` that an MCP event brought: their text.
fn mcp_messages(server: &Server, id: &str) -> Vec<String> {
    triggered_messages(server, id, "mcp-event")
}

#[test]
fn resource_updates_reach_subscribed_tasks_through_filters_and_cold_start_triggers() {
    let at = setup();
    let b_uri = format!("file://{}/b.txt", at.files.display());
    let (code, out, err) = agentmesh(&["validate", at.dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");

    let server = Server::start(AGENTMESH, &at.dir, &at.data, &[]);
    let watch = server.create_task(&json!({"agent": "lab/watch"}));
    // The host subscribed to both resources (the server notes each subscription).
    let subscribed = wait_for(Duration::from_secs(30), || {
        let noted = std::fs::read_to_string(at.root.path().join("subscribed")).ok()?;
        (noted.contains(&at.a_uri) && noted.contains(&b_uri)).then_some(())
    });
    assert!(
        subscribed.is_some(),
        "the host never subscribed to both resources"
    );

    // An update of a.txt: the task bound to it gets the event's message, as an mcp-event.
    std::fs::write(at.files.join("a.txt"), "two").unwrap();
    let got = wait_for(Duration::from_secs(30), || {
        let messages = mcp_messages(&server, &watch);
        (!messages.is_empty()).then_some(messages)
    });
    assert_eq!(got, Some(vec![format!("changed {}", at.a_uri)]));

    // An update of b.txt: the filter keeps it from the task bound to a.txt; the trigger's
    // `before` lets it through, and a new task starts with it.
    std::fs::write(at.files.join("b.txt"), "two").unwrap();
    let fired = wait_for(Duration::from_secs(30), || {
        let t = server.request("GET", "/v1/triggers/lab/on-b").send().json();
        (t["status"]["total_triggers"] == 1).then_some(t)
    })
    .expect("the trigger fired");
    let fresh = fired["status"]["last_task_id"].as_str().unwrap().to_owned();
    let started = wait_for(Duration::from_secs(30), || {
        let messages = mcp_messages(&server, &fresh);
        (!messages.is_empty()).then_some(messages)
    });
    assert_eq!(started, Some(vec![format!("new {b_uri}")]));
    let task = server
        .request("GET", &format!("/v1/tasks/{fresh}"))
        .send()
        .json();
    assert_eq!(task["agent"], "lab/fresh", "{task}");
    assert_eq!(task["owner"], "user:ops", "{task}");
    assert_eq!(
        mcp_messages(&server, &watch),
        [format!("changed {}", at.a_uri)]
    );
    // a.txt's update fired no trigger (its `before` failed): one fire in all.
    let t = server.request("GET", "/v1/triggers/lab/on-b").send().json();
    assert_eq!(t["status"]["total_triggers"], 1, "{t}");

    // Neither the tool's events nor the source take deliveries over HTTP: an unsigned POST
    // cannot stand for an MCP update.
    let body = json!({"uri": at.a_uri});
    let r = server
        .request("POST", "/v1/webhooks/tools/lab/files")
        .json(&body)
        .send();
    assert_eq!(r.status, 404, "{}", r.text());
    let r = server
        .request("POST", "/v1/webhooks/sources/files")
        .json(&body)
        .send();
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(mcp_messages(&server, &watch).len(), 1);
}

#[test]
fn a_server_that_stops_is_subscribed_again() {
    let at = setup();
    let server = Server::start(AGENTMESH, &at.dir, &at.data, &[]);
    let watch = server.create_task(&json!({"agent": "lab/watch"}));
    let log = at.root.path().join("subscribed");
    let subscriptions = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches(&at.a_uri)
            .count()
    };
    wait_for(Duration::from_secs(30), || {
        (subscriptions() >= 1).then_some(())
    })
    .expect("the host subscribed");
    // The server goes away (it exits when told to): the host starts it again and subscribes
    // anew, and the next update arrives.
    std::fs::write(at.root.path().join("stop"), "").unwrap();
    wait_for(Duration::from_secs(30), || {
        (subscriptions() >= 2).then_some(())
    })
    .expect("the host subscribed again");
    // `/v1/status` shows the session working again, and why it was opened anew.
    let source = wait_for(Duration::from_secs(30), || {
        let status = server.request("GET", "/v1/status").send().json();
        let source = status["event_sources"][0].clone();
        (source["last_error"].is_string() && source["failures"] == 0).then_some(source)
    })
    .expect("/v1/status never showed the session ended and subscribed again");
    assert_eq!(source["kind"], "mcp", "{source}");
    assert_eq!(source["last_error"], "the session ended", "{source}");
    assert!(source["last_ok_at"].is_string(), "{source}");
    std::fs::write(at.files.join("a.txt"), "two").unwrap();
    let got = wait_for(Duration::from_secs(30), || {
        let messages = mcp_messages(&server, &watch);
        (!messages.is_empty()).then_some(messages)
    });
    assert_eq!(got, Some(vec![format!("changed {}", at.a_uri)]));
}

#[test]
fn validate_places_mcp_subscriptions_and_sources() {
    let http_tool = "kind: commonagents.info/v1beta2/tool
namespace: lab
name: web
description: Over HTTP.
actions:
  - name: get
    description: Get.
    execute: {stateless_http: {method: GET, url: \"https://example.com/\"}}
events:
  - name: changed
    message: changed
    receive:
      subscription:
        resources: [\"file:///x\"]
";
    let mcp_tool = "kind: commonagents.info/v1beta2/tool
namespace: lab
name: srv
description: An MCP server.
mcp: {transport: stdio, command: /bin/true}
actions:
  - name: names
    description: Names.
    execute: {mcp: {}}
events:
  - name: changed
    message: changed
    receive:
      subscription:
        subscribe: {method: POST, url: \"https://example.com/watch\"}
  - name: hooked
    message: hooked
    receive:
      webhook: {}
";
    // The spec's HTTP subscription mode does not validate: this host does not run it, and an
    // event that would never arrive is not accepted.
    let poller = "kind: commonagents.info/v1beta2/tool
namespace: lab
name: poller
description: Polls.
actions:
  - name: get
    description: Get.
    execute: {stateless_http: {method: GET, url: \"https://example.com/\"}}
events:
  - name: pushed
    message: pushed
    receive:
      subscription:
        subscribe: {method: POST, url: \"https://example.com/watch\"}
        unsubscribe: {method: POST, url: \"https://example.com/unwatch\"}
  - name: polled
    message: polled
    receive:
      poll: {url: \"https://example.com/items\", detect: \"response\"}
";
    let host = "kind: agentmesh/v1/host
sources:
  web: {mcp: {tool: lab/web, event: changed}}
  hooked: {mcp: {tool: lab/srv, event: hooked}}
  nowhere: {mcp: {tool: lab/srvv, event: changed}}
  both: {signature: github, mcp: {tool: lab/srv, event: changed}}
";
    let (_config, dir, _data) = dirs(&[
        ("web.yaml", http_tool),
        ("srv.yaml", mcp_tool),
        ("poller.yaml", poller),
        ("host.yaml", host),
    ]);
    let (code, out, err) = agentmesh(&["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    let said = format!("{out}{err}");
    for expected in [
        "web.yaml:13:7: error: event `changed`: `resources` names resources of the MCP server in the tool's shared `mcp` block, and this tool has none",
        "srv.yaml:14:7: error: event `changed`: a subscription on an MCP tool needs `resources`",
        "srv.yaml:14:7: error: event `changed`: `subscribe` is for an HTTP subscription",
        "error: source `web`: event `changed` of tool `lab/web` is not received by MCP subscription",
        "error: source `hooked`: event `hooked` of tool `lab/srv` is not received by MCP subscription",
        "error: source `nowhere`: no tool `lab/srvv`; did you mean `lab/srv`?",
        "error: source `both`: an `mcp` source takes no deliveries, so no `signature`, `secret` or `tokens`",
        "poller.yaml:13:7: error: event `pushed`: this host does not run `receive.subscription` over HTTP: the event would never arrive",
    ] {
        assert!(said.contains(expected), "missing `{expected}` in:\n{said}");
    }
}

#[test]
fn a_reload_that_changes_the_tool_subscribes_anew() {
    let at = setup();
    let b_uri = format!("file://{}/b.txt", at.files.display());
    let full = files_tool(&at.files);
    let only_a = full.replace(", \"file://{settings.dir}/b.txt\"", "");
    assert_ne!(only_a, full);
    std::fs::write(at.dir.join("files.yaml"), &only_a).unwrap();
    let server = Server::start(AGENTMESH, &at.dir, &at.data, &[]);
    let noted = || std::fs::read_to_string(at.root.path().join("subscribed")).unwrap_or_default();
    wait_for(Duration::from_secs(30), || {
        noted().contains(&at.a_uri).then_some(())
    })
    .expect("the host subscribed to a.txt");
    assert!(!noted().contains(&b_uri));

    // The tool now names b.txt too: the reload opens its session anew and subscribes to both,
    // and an update of b.txt fires the trigger.
    std::fs::write(at.dir.join("files.yaml"), &full).unwrap();
    wait_for(Duration::from_secs(30), || {
        noted().contains(&b_uri).then_some(())
    })
    .expect("the host subscribed to b.txt after the reload");
    std::fs::write(at.files.join("b.txt"), "two").unwrap();
    let fired = wait_for(Duration::from_secs(30), || {
        let t = server.request("GET", "/v1/triggers/lab/on-b").send().json();
        (t["status"]["total_triggers"] == 1).then_some(())
    });
    assert!(fired.is_some(), "an update of b.txt fired no trigger");
}
