//! Capacity never kills a task: tasks keep their Wasm tool sessions while idle; when the
//! instance pool is full the least recently used idle session is torn down and its task gets a
//! new one at its next call; a call that finds every instance busy waits a bounded time and is
//! then an error the LLM sees. `/metrics` shows each component's instances, evictions, calls,
//! errors and call latency.

use std::time::Duration;

use agentmesh_testkit::fixtures::config_dir;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::wasm::{guest, notes_tool};

/// The label of the `t/probe` tool's series.
const PROBE: &str = "component=\"t/probe\"";

/// Tools `t/probe` (the `probe` test program, which keeps a secret in its instance's memory)
/// and `t/notes` (keeps notes in the plugin key-value store), and an agent `t/a` using both on
/// `scripted/script.yaml`.
fn probe_and_notes(host: &str, script: &str) -> tempfile::TempDir {
    let tools = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: probe
description: Remembers a secret in its instance.
wasm: {{component: {probe}}}
actions:
  - name: remember
    description: Keep the secret in memory.
    parameters: {{type: object, properties: {{secret: {{type: string}}}}}}
  - name: recall
    description: Look for the secret in memory.
    parameters: {{type: object, properties: {{secret: {{type: string}}}}}}
---
{notes}---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Keeps a secret in a session and a note in the store.
prompt: Go.
model: scripted/script.yaml
capabilities:
  probe: \"*\"
  notes: \"*\"
",
        probe = guest("test_probe").display(),
        notes = notes_tool(),
    );
    config_dir(&[
        ("host.yaml", host),
        ("all.yaml", &tools),
        ("script.yaml", script),
    ])
}

/// Turn one: remember a secret in the probe's session, store a note. Turn two: look for both.
const REMEMBER_THEN_RECALL: &str = "responses:
  - tool_calls:
      - {name: probe_remember, arguments: {secret: kept-in-memory}}
      - {name: notes_put, arguments: {key: plan, value: kept-in-store}}
  - text: kept
  - tool_calls:
      - {name: probe_recall, arguments: {secret: kept-in-memory}}
      - {name: notes_get, arguments: {key: plan}}
  - text: done
";

fn create(server: &Server) -> String {
    server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}))
}

fn task(server: &Server, id: &str) -> Value {
    server
        .request("GET", &format!("/v1/tasks/{id}"))
        .send()
        .json()
}

fn task_events(server: &Server, id: &str) -> Vec<Value> {
    server
        .request("GET", &format!("/v1/tasks/{id}/events"))
        .send()
        .json()["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The results of task `id`'s observations, in order.
pub fn observations(server: &Server, id: &str) -> Vec<Value> {
    task_events(server, id)
        .into_iter()
        .filter(|e| e["kind"] == "ObservationEvent")
        .map(|e| e["result"].clone())
        .collect()
}

/// Waits (at most `limit`) until task `id` has `n` agent messages, i.e. `n` turns ended,
/// and answers the task.
fn wait_for_turns(server: &Server, id: &str, n: usize, limit: Duration) -> Value {
    wait_for(limit, || {
        let task = task(server, id);
        if task["status"] == "terminated" {
            return Some(task);
        }
        let turns = task_events(server, id)
            .iter()
            .filter(|e| e["kind"] == "MessageEvent" && e["source"] == "agent")
            .count();
        (turns >= n && task["status"] == "idle").then_some(task)
    })
    .unwrap_or_else(|| panic!("task {id} did not finish turn {n}"))
}

/// Sends task `id` another input.
fn send_input(server: &Server, id: &str) {
    let r = server
        .request("POST", &format!("/v1/tasks/{id}/input"))
        .json(&json!({"message": "again"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
}

/// The tasks of `t/a` with `status` (up to 1,000: one page at the API's largest `limit`).
fn tasks_with(server: &Server, status: &str) -> Vec<Value> {
    server
        .request(
            "GET",
            &format!("/v1/tasks?agent=t/a&status={status}&limit=1000"),
        )
        .send()
        .json()["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The value of the `/metrics` sample `name{labels}` (labels as written, e.g.
/// `component="t/probe"`).
fn sample(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    let series = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{labels}}}")
    };
    metrics.lines().find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        (key == series).then(|| value.parse().ok())?
    })
}

/// [`sample`], which must be there.
pub fn metric(metrics: &str, name: &str, labels: &str) -> f64 {
    sample(metrics, name, labels).unwrap_or_else(|| panic!("no {name}{{{labels}}} in\n{metrics}"))
}

/// Asserts the value of each `(series, value)` of `t/probe` in `metrics`.
fn assert_probe(metrics: &str, expected: &[(&str, f64)]) {
    for (name, value) in expected {
        assert_eq!(metric(metrics, name, PROBE), *value, "{name}\n{metrics}");
    }
}

/// A terminated task's story, for a failure message.
fn why_terminated(server: &Server, tasks: &[Value]) -> String {
    let Some(first) = tasks.first() else {
        return String::new();
    };
    let id = first["id"].as_str().unwrap_or_default();
    format!(
        "{} tasks terminated; the first, {id}: {} {:?}",
        tasks.len(),
        first["reason"],
        task_events(server, id)
            .iter()
            .rev()
            .take(4)
            .collect::<Vec<_>>()
    )
}

fn recall_found(result: &Value) -> bool {
    result["found"].is_array()
}

/// With the default pool (100 instances), 1,000 tasks each keep two sessions and go idle:
/// none is terminated. The first task's next call finds its session evicted — a new session,
/// whose memory no longer holds the secret — while its note, in the key-value store, remains.
#[test]
fn a_thousand_tasks_keep_sessions_and_the_first_is_served_again() {
    let dir = probe_and_notes("kind: agentmesh/v1/host\n", REMEMBER_THEN_RECALL);
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &[]);
    const TASKS: usize = 1000;
    let ids: Vec<String> = (0..TASKS).map(|_| create(&server)).collect();

    let settled = wait_for(Duration::from_secs(180), || {
        let idle = tasks_with(&server, "idle").len();
        let terminated = tasks_with(&server, "terminated").len();
        (idle + terminated == TASKS).then_some(())
    });
    let terminated = tasks_with(&server, "terminated");
    assert!(
        terminated.is_empty(),
        "{}",
        why_terminated(&server, &terminated)
    );
    assert!(
        settled.is_some(),
        "the tasks did not all go idle: {} idle, {} running",
        tasks_with(&server, "idle").len(),
        tasks_with(&server, "running").len()
    );

    let first = &ids[0];
    send_input(&server, first);
    let task = wait_for_turns(&server, first, 2, Duration::from_secs(60));
    assert_eq!(task["status"], "idle", "{task}");
    let results = observations(&server, first);
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(
        !recall_found(&results[2]),
        "the first task's session survived 999 others in a pool of 100: {results:?}"
    );
    assert!(
        results[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no trace of the secret")),
        "the recall ran in a new session: {results:?}"
    );
    assert_eq!(
        results[3],
        json!({"key": "plan", "value": "kept-in-store"}),
        "state in the key-value store outlives the session"
    );

    let metrics = server.request("GET", "/metrics").send().text();
    assert_eq!(
        metric(&metrics, "agentmesh_component_instances_max", ""),
        100.0
    );
    let in_use = metric(&metrics, "agentmesh_component_instances_in_use", PROBE)
        + metric(
            &metrics,
            "agentmesh_component_instances_in_use",
            "component=\"t/notes\"",
        );
    assert!(in_use <= 100.0, "{in_use} instances in use\n{metrics}");
    let evictions = metric(&metrics, "agentmesh_component_evictions_total", PROBE);
    assert!(evictions >= 900.0, "{evictions} evictions\n{metrics}");
    // Initialize: every task once, and the first task again.
    assert_probe(
        &metrics,
        &[
            ("agentmesh_component_calls_total", 1001.0),
            ("agentmesh_component_initializations_total", 1001.0),
            ("agentmesh_component_call_duration_seconds_count", 1001.0),
        ],
    );
    assert!(metric(&metrics, "agentmesh_component_errors_total", PROBE) >= 1.0);
    let all = metric(
        &metrics,
        "agentmesh_component_call_duration_seconds_bucket",
        &format!("{PROBE},le=\"+Inf\""),
    );
    assert_eq!(all, 1001.0);
}

/// With `policy.max_instances: 2`, three tasks one after another: the third evicts the first
/// (Teardown), and the first's next call evicts the second, the least recently used, not the
/// third — whose session still holds what it remembered.
#[test]
fn the_least_recently_used_idle_session_is_evicted_and_reopened_at_its_next_call() {
    let script = "responses:
  - tool_calls: [{name: probe_remember, arguments: {secret: kept-in-memory}}]
  - text: kept
  - tool_calls: [{name: probe_recall, arguments: {secret: kept-in-memory}}]
  - text: done
";
    let dir = probe_and_notes(
        "kind: agentmesh/v1/host\npolicy: {max_instances: 2}\n",
        script,
    );
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &[]);
    let limit = Duration::from_secs(30);
    let ids: Vec<String> = (0..3)
        .map(|_| {
            let id = create(&server);
            let task = wait_for_turns(&server, &id, 1, limit);
            assert_eq!(task["status"], "idle", "{task}");
            id
        })
        .collect();
    let metrics = server.request("GET", "/metrics").send().text();
    assert_eq!(
        metric(&metrics, "agentmesh_component_instances_max", ""),
        2.0
    );
    assert_probe(
        &metrics,
        &[
            ("agentmesh_component_evictions_total", 1.0),
            ("agentmesh_component_teardowns_total", 1.0),
            ("agentmesh_component_instances_in_use", 2.0),
        ],
    );

    send_input(&server, &ids[0]);
    assert_eq!(wait_for_turns(&server, &ids[0], 2, limit)["status"], "idle");
    send_input(&server, &ids[2]);
    assert_eq!(wait_for_turns(&server, &ids[2], 2, limit)["status"], "idle");
    let first = observations(&server, &ids[0]);
    assert!(
        first[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no trace of the secret")),
        "the first task's session was evicted, its next call ran in a new one: {first:?}"
    );
    let third = observations(&server, &ids[2]);
    assert!(
        recall_found(&third[1]),
        "the third task's session was not the least recently used: {third:?}"
    );

    let metrics = server.request("GET", "/metrics").send().text();
    assert_probe(
        &metrics,
        &[
            ("agentmesh_component_evictions_total", 2.0),
            ("agentmesh_component_initializations_total", 4.0),
            ("agentmesh_component_calls_total", 5.0),
            ("agentmesh_component_errors_total", 1.0),
        ],
    );
}

/// With one instance, two tasks call a tool that spins until its timeout at the same time:
/// one of them gets the instance; the other waits `policy.instance_wait` and sees an error
/// saying every instance is busy. Neither task is terminated.
#[test]
fn a_call_that_finds_every_instance_busy_is_an_error_the_llm_sees() {
    let dir = crate::wasm::spinning_agent(
        "kind: agentmesh/v1/host\npolicy: {max_instances: 1, instance_wait: 200ms}\n",
    );
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &[]);
    let first = create(&server);
    server.wait_for_event(&first, "ActionEvent");
    let second = create(&server);
    let limit = Duration::from_secs(30);
    let errors: Vec<String> = [&first, &second]
        .iter()
        .map(|id| {
            let task = wait_for_turns(&server, id, 1, limit);
            assert_eq!(task["status"], "idle", "{task}");
            let results = observations(&server, id);
            results[0]["error"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    let busy = errors.iter().filter(|e| e.contains("busy")).count();
    let timed_out = errors.iter().filter(|e| e.contains("timeout")).count();
    assert_eq!((busy, timed_out), (1, 1), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("`t/spin`")),
        "the errors name the tool: {errors:?}"
    );

    let metrics = server.request("GET", "/metrics").send().text();
    assert_eq!(
        metric(
            &metrics,
            "agentmesh_component_errors_total",
            "component=\"t/spin\""
        ),
        2.0
    );
}
