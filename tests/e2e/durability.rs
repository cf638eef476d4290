//! Durable acknowledgement: a webhook answered 2xx is on disk. The test kills the server with
//! SIGKILL while a load generator sends signed webhooks, restarts it on the same data dir, and
//! checks that every acknowledged delivery is queued (and processed) exactly once, and nothing
//! that was not sent is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentmesh_routing::signature::sign_github;
use serde_json::json;

use crate::server::{Server, wait_for};

const SECRET: &str = "crash test secret";

fn config(dir: &Path) {
    std::fs::write(
        dir.join("manifests.yaml"),
        "kind: commonagents.info/v1beta2/tool
namespace: ops
name: pager
description: Pages.
settings:
  type: object
  properties:
    secret: {type: string}
actions:
  - name: ack
    description: Acknowledge.
    execute:
      cel: {expression: \"{'ok': true}\"}
events:
  - name: alert
    message: \"alert {event.payload.n}\"
    receive:
      webhook:
        secret: \"{settings.secret}\"
---
kind: commonagents.info/v1beta2/agent
namespace: ops
name: oncall
description: Hears alerts.
prompt: You are on call.
model: scripted/script.yaml
capabilities:
  pager: \"*\"
---
kind: agentmesh/v1/host
settings:
  ops:
    pager:
      secret: {env: CRASH_SECRET}
",
    )
    .unwrap();
    std::fs::write(dir.join("script.yaml"), "responses: []\n").unwrap();
}

#[test]
fn acknowledged_webhooks_survive_sigkill_exactly_once() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    let data = root.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    config(&dir);
    let env = [("CRASH_SECRET", SECRET)];
    let server = Server::start(&dir, &data, &env);
    let r = server
        .request("POST", "/v1/tasks")
        .json(&json!({"agent": "ops/oncall"}))
        .send();
    assert_eq!(r.status, 201, "{}", r.text());
    let task = r.json()["id"].as_str().unwrap().to_owned();

    // The load generator: 4 threads sending signed webhooks with unique delivery ids.
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let sent = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let addr = server.addr;
    let mut threads = Vec::new();
    for t in 0..4 {
        let (acked, sent, stop) = (Arc::clone(&acked), Arc::clone(&sent), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            for n in 0.. {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let id = format!("d-{t}-{n}");
                let body = json!({"n": id}).to_string().into_bytes();
                sent.lock().unwrap().insert(id.clone());
                let Some(status) = crate::server::post_raw(
                    addr,
                    "/v1/webhooks/tools/ops/pager",
                    &[
                        ("X-GitHub-Delivery", &id),
                        ("X-Hub-Signature-256", &sign_github(SECRET, &body)),
                    ],
                    &body,
                ) else {
                    // The server is gone: this delivery's fate is unknown, and it stops here.
                    return;
                };
                if (200..300).contains(&status) {
                    acked.lock().unwrap().insert(id);
                }
            }
        }));
    }
    // Let some deliveries through, then crash in the middle of the load.
    wait_for(Duration::from_secs(60), || {
        (acked.lock().unwrap().len() >= 200).then_some(())
    })
    .expect("the server acknowledged deliveries");
    server.kill();
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let sent = sent.lock().unwrap().clone();

    let server = Server::start(&dir, &data, &env);
    let settled = wait_for(Duration::from_secs(120), || {
        let t = server
            .request("GET", &format!("/v1/tasks/{task}"))
            .send()
            .json();
        (t["queue_depth"] == 0 && t["status"] == "idle").then_some(t)
    });
    assert!(settled.is_some(), "the restarted host processed the queue");
    let events = server
        .request("GET", &format!("/v1/tasks/{task}/events"))
        .send()
        .json();
    let mut processed: BTreeMap<String, usize> = BTreeMap::new();
    for e in events["events"].as_array().unwrap() {
        if e["kind"] == "MessageEvent" && e["metadata"]["trigger"]["source"] == "webhook" {
            let id = e["metadata"]["trigger"]["delivery_id"]
                .as_str()
                .unwrap()
                .to_owned();
            *processed.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = processed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed more than once: {twice:?}");
    let lost: Vec<_> = acked
        .iter()
        .filter(|id| !processed.contains_key(*id))
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let phantom: Vec<_> = processed.keys().filter(|id| !sent.contains(*id)).collect();
    assert!(phantom.is_empty(), "never sent: {phantom:?}");
    eprintln!(
        "sent {}, acknowledged {}, processed {} (unacknowledged but processed: {})",
        sent.len(),
        acked.len(),
        processed.len(),
        processed.len() - acked.len()
    );
    // A redelivery of an acknowledged id after the restart is still a duplicate.
    let first = acked.iter().next().unwrap();
    let body = json!({"n": first}).to_string().into_bytes();
    let status = crate::server::post_raw(
        server.addr,
        "/v1/webhooks/tools/ops/pager",
        &[
            ("X-GitHub-Delivery", first),
            ("X-Hub-Signature-256", &sign_github(SECRET, &body)),
        ],
        &body,
    );
    assert_eq!(status, Some(200));
    // The subscription came back with the task: a new delivery routes to it.
    let body = json!({"n": "after-restart"}).to_string().into_bytes();
    let status = crate::server::post_raw(
        server.addr,
        "/v1/webhooks/tools/ops/pager",
        &[
            ("X-GitHub-Delivery", "after-restart"),
            ("X-Hub-Signature-256", &sign_github(SECRET, &body)),
        ],
        &body,
    );
    assert_eq!(status, Some(202));
    let t = server
        .request("GET", &format!("/v1/tasks/{task}"))
        .send()
        .json();
    assert_eq!(t["subscriptions"][0]["event"], "alert", "{t}");
}

/// A loopback port that accepts connections and never answers them, for `for_secs` seconds.
fn silent_port(for_secs: u64) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(for_secs);
        let mut held = Vec::new();
        while std::time::Instant::now() < until {
            match listener.accept() {
                Ok((stream, _)) => held.push(stream),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    port
}

/// Waits until task `id` is running with a call in flight: its last `ActionEvent` has no
/// answer yet.
fn wait_for_call_in_flight(server: &Server, id: &str) {
    let found = wait_for(Duration::from_secs(30), || {
        let task = server
            .request("GET", &format!("/v1/tasks/{id}"))
            .send()
            .json();
        let log = server
            .request("GET", &format!("/v1/tasks/{id}/events"))
            .send()
            .json();
        let events = log["events"].as_array()?;
        let last_call = events.iter().rposition(|e| e["kind"] == "ActionEvent")?;
        let answered = events[last_call..].iter().any(|e| {
            [
                "ObservationEvent",
                "AgentErrorEvent",
                "UserRejectObservation",
            ]
            .contains(&e["kind"].as_str().unwrap_or_default())
        });
        (task["status"] == "running" && !answered).then_some(())
    });
    assert!(found.is_some(), "task {id} never had a call in flight");
}

#[test]
fn a_task_whose_turn_runs_when_the_host_goes_down_twice_is_ended_and_the_host_serves_on() {
    let port = silent_port(120);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: lab
name: stuck
description: Never answers.
actions:
  - name: wait
    description: Wait.
    execute:
      stateless_http: {{method: GET, url: \"http://127.0.0.1:{port}/\", timeout: 60s}}
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: stuck
description: Calls what never answers.
prompt: Wait.
model: scripted/stuck.yaml
capabilities:
  stuck: \"*\"
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: fine
description: Answers.
prompt: Answer.
model: scripted/fine.yaml
"
    );
    std::fs::write(dir.join("manifests.yaml"), manifests).unwrap();
    let call = "  - tool_calls: [{name: stuck, arguments: {}}]\n";
    std::fs::write(dir.join("stuck.yaml"), format!("responses:\n{call}{call}")).unwrap();
    std::fs::write(dir.join("fine.yaml"), "responses:\n  - text: Fine.\n").unwrap();
    let data = root.path().join("data");

    let server = Server::start(&dir, &data, &[]);
    let fine = server.create_task(&json!({"agent": "lab/fine", "input": {"message": "hi"}}));
    server.wait_for_event(&fine, "MessageEvent");
    let stuck = server.create_task(&json!({"agent": "lab/stuck", "input": {"message": "go"}}));
    wait_for_call_in_flight(&server, &stuck);
    server.kill();

    // The first time, the turn runs again (its input was not consumed durably yet) or the task
    // only loses it (the call is reported as interrupted) and takes new input.
    let server = Server::start(&dir, &data, &[]);
    let task = |server: &Server, id: &str| {
        server
            .request("GET", &format!("/v1/tasks/{id}"))
            .send()
            .json()
    };
    if task(&server, &stuck)["status"] == "idle" {
        let r = server
            .request("POST", &format!("/v1/tasks/{stuck}/input"))
            .json(&json!({"message": "again"}))
            .send();
        assert_eq!(r.status, 202, "{}", r.text());
    }
    wait_for_call_in_flight(&server, &stuck);
    server.kill();

    // The second time the host goes down during a turn of the task, the task is ended.
    let server = Server::start(&dir, &data, &[]);
    let ended = task(&server, &stuck);
    assert_eq!(ended["status"], "terminated", "{ended}");
    assert_eq!(ended["reason"], "error", "{ended}");
    let log = server
        .request("GET", &format!("/v1/tasks/{stuck}/events"))
        .send()
        .json();
    let why = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "error")
        .map(|e| e["value"]["message"].clone())
        .unwrap_or_default();
    assert!(
        why.as_str().unwrap_or_default().contains("went down twice"),
        "{log}"
    );
    // Other tasks are untouched and the host serves on.
    assert_eq!(task(&server, &fine)["status"], "idle");
    assert_eq!(server.request("GET", "/healthz").send().status, 200);
    let more = server.create_task(&json!({"agent": "lab/fine", "input": {"message": "hi"}}));
    server.wait_for_event(&more, "MessageEvent");
    // A clean stop leaves no task marked: the next start ends nothing.
    assert_eq!(server.terminate(), Some(0));
    let server = Server::start(&dir, &data, &[]);
    assert_eq!(task(&server, &fine)["status"], "idle");
}
