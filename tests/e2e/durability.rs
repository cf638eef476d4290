//! Durable acknowledgement: a webhook answered 2xx is on disk. The test kills the server with
//! SIGKILL while a load generator sends signed webhooks, restarts it on the same data dir, and
//! checks that every acknowledged delivery is queued (and processed) exactly once, and nothing
//! that was not sent is.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentmesh_routing::signature::sign_github;
use agentmesh_testkit::client::Request;
use agentmesh_testkit::fixtures::{PAGER_HOST, dirs, pager_tool, scripted_agent};
use agentmesh_testkit::postgres::Postgres;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::json;

use crate::AGENTMESH;

pub(crate) const SECRET: &str = "crash test secret";

/// The config: `ops/oncall` takes every `ops/pager` alert as input, answering nothing; with
/// `store`, the host config's `store` block.
pub(crate) fn config(store: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let oncall = scripted_agent("ops/oncall", "capabilities:\n  pager: \"*\"\n");
    dirs(&[
        ("pager.yaml", &pager_tool("alert {event.payload.n}", None)),
        ("oncall.yaml", &oncall),
        ("host.yaml", &format!("{PAGER_HOST}{store}")),
        ("script.yaml", "responses: []\n"),
    ])
}

/// Posts the alert `{"n": id}` with delivery id `id`, signed: the status and the answer's
/// `status` field (`accepted`, `unmatched`, `duplicate`), or `None` when the server does not
/// answer (it is down or died mid-request).
pub(crate) fn deliver(addr: SocketAddr, id: &str) -> Option<(u16, String)> {
    let body = json!({"n": id}).to_string().into_bytes();
    let answer = Request::new(addr, "POST", "/v1/webhooks/tools/ops/pager")
        .header("Content-Type", "application/json")
        .header("X-GitHub-Delivery", id)
        .header("X-Hub-Signature-256", &sign_github(SECRET, &body))
        .body(body)
        .try_send(Duration::from_secs(20))?;
    let said = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|v| v["status"].as_str().map(str::to_owned))
        .unwrap_or_default();
    Some((answer.status, said))
}

/// A new task of `ops/oncall` created through `server`, without input: its id.
pub(crate) fn oncall_task(server: &Server) -> String {
    let r = server
        .request("POST", "/v1/tasks")
        .json(&json!({"agent": "ops/oncall"}))
        .send();
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["id"].as_str().unwrap().to_owned()
}

#[test]
fn acknowledged_webhooks_survive_sigkill_exactly_once() {
    survive_sigkill_exactly_once(None);
}

#[test]
fn acknowledged_webhooks_on_postgres_survive_sigkill_exactly_once() {
    let pg = Postgres::start();
    survive_sigkill_exactly_once(Some(&pg.new_database()));
}

/// Signed webhooks under load, the host SIGKILLed, restarted: every acknowledged delivery
/// processed exactly once. With `database`, the host's store is that PostgreSQL database, and
/// the restarted host has a new, empty data dir.
fn survive_sigkill_exactly_once(database: Option<&str>) {
    let store = match database {
        Some(_) => "store: {backend: postgres, url: {env: DATABASE_URL}, pool: 8}\n",
        None => "",
    };
    let (root, dir, data) = config(store);
    let mut env = vec![("PAGER_SECRET", SECRET)];
    if let Some(url) = database {
        env.push(("DATABASE_URL", url));
    }
    let server = Server::start(AGENTMESH, &dir, &data, &env);
    let task = oncall_task(&server);

    // The load generator: 4 threads sending signed webhooks with unique delivery ids.
    // Each acknowledged delivery with what its answer said.
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
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
                sent.lock().unwrap().insert(id.clone());
                let Some((status, said)) = deliver(addr, &id) else {
                    // The server is gone: this delivery's fate is unknown, and it stops here.
                    return;
                };
                if (200..300).contains(&status) {
                    acked.lock().unwrap().insert(id, said);
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

    let data = match database {
        // Everything is in the database: nothing of the first host's data dir is needed.
        Some(_) => root.path().join("data-after-restart"),
        None => data,
    };
    let server = Server::start(AGENTMESH, &dir, &data, &env);
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
        .filter(|(id, _)| !processed.contains_key(*id))
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
    let (first, _) = acked.iter().next().unwrap();
    assert_eq!(
        deliver(server.addr, first),
        Some((200, "duplicate".to_owned()))
    );
    // The subscription came back with the task: a new delivery routes to it.
    assert_eq!(
        deliver(server.addr, "after-restart"),
        Some((202, "accepted".to_owned()))
    );
    let t = server
        .request("GET", &format!("/v1/tasks/{task}"))
        .send()
        .json();
    assert_eq!(t["subscriptions"][0]["event"], "alert", "{t}");
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
    let port = HeldPort::start(120).port;
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
    let call = "  - tool_calls: [{name: stuck, arguments: {}}]\n";
    let (_root, dir, data) = dirs(&[
        ("manifests.yaml", &manifests),
        ("stuck.yaml", &format!("responses:\n{call}{call}")),
        ("fine.yaml", "responses:\n  - text: Fine.\n"),
    ]);

    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let fine = server.create_task(&json!({"agent": "lab/fine", "input": {"message": "hi"}}));
    server.wait_for_event(&fine, "MessageEvent");
    let stuck = server.create_task(&json!({"agent": "lab/stuck", "input": {"message": "go"}}));
    wait_for_call_in_flight(&server, &stuck);
    server.kill();

    // The first time, the turn runs again (its input was not consumed durably yet) or the task
    // only loses it (the call is reported as interrupted) and takes new input.
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
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
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
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
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    assert_eq!(task(&server, &fine)["status"], "idle");
}

/// A loopback port that accepts connections and holds them unanswered until `release` is set,
/// then closes them (and any later one) at once; `accepted` counts the connections.
struct HeldPort {
    port: u16,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    release: Arc<AtomicBool>,
}

impl HeldPort {
    fn start(for_secs: u64) -> HeldPort {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let (count, released) = (Arc::clone(&accepted), Arc::clone(&release));
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + Duration::from_secs(for_secs);
            let mut held = Vec::new();
            while std::time::Instant::now() < until {
                if released.load(Ordering::SeqCst) {
                    held.clear();
                }
                match listener.accept() {
                    Ok((stream, _)) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        held.push(stream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        HeldPort {
            port,
            accepted,
            release,
        }
    }

    /// Waits until `n` connections were accepted.
    fn wait_for(&self, n: usize) {
        let reached = wait_for(Duration::from_secs(30), || {
            (self.accepted.load(Ordering::SeqCst) >= n).then_some(())
        });
        assert!(
            reached.is_some(),
            "no connection number {n} to port {}",
            self.port
        );
    }
}

#[test]
fn an_input_whose_guardrail_step_is_calling_out_when_the_host_dies_is_not_lost() {
    let held = HeldPort::start(120);
    let manifests = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: lab
name: check
description: Checks slowly.
actions:
  - name: input
    description: Check the input.
    execute:
      stateless_http: {{method: GET, url: \"http://127.0.0.1:{}/\", timeout: 60s}}
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: guarded
description: Checks its input outside first.
prompt: Answer.
model: scripted/script.yaml
guardrails:
  before:
    - invoke: \"check:input\"
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: plain
description: Answers.
prompt: Answer.
model: scripted/script.yaml
",
        held.port
    );
    let (_root, dir, data) = dirs(&[
        ("manifests.yaml", &manifests),
        ("script.yaml", "responses:\n  - text: Fine.\n"),
    ]);
    let task_of = |server: &Server, id: &str| {
        server
            .request("GET", &format!("/v1/tasks/{id}"))
            .send()
            .json()
    };

    // While the input's guardrail step calls out, the input is still queued: it is taken only
    // with the event that logs it.
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let id = server.create_task(&json!({"agent": "lab/guarded", "input": {"message": "first"}}));
    held.wait_for(1);
    let task = task_of(&server, &id);
    assert_eq!(task["queue_depth"], 1, "{task}");
    // Another task's input is acknowledged once on disk: the store is flushed with whatever
    // the guarded task wrote so far.
    server.create_task(&json!({"agent": "lab/plain", "input": {"message": "hi"}}));
    server.kill();

    // After the restart the input runs again, through the same step: still queued while the
    // step calls out (the crash marker written before the turn does not take it either).
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    held.wait_for(2);
    let task = task_of(&server, &id);
    assert_eq!(task["queue_depth"], 1, "{task}");

    // The step fails (the connection is closed): the guardrail fails closed, and the input is
    // in the log of the task it locked.
    held.release.store(true, Ordering::SeqCst);
    let ended = wait_for(Duration::from_secs(60), || {
        let task = task_of(&server, &id);
        (task["status"] == "terminated").then_some(task)
    })
    .expect("the task ended");
    assert_eq!(ended["reason"], "locked", "{ended}");
    assert_eq!(server.user_texts(&id), [json!("first")]);
}

/// A lock that event middleware asked for is on disk with the delivery's answer: a host that
/// goes down while the task's turn is still calling out (the lock waits for its next step)
/// locks the task when it comes back, before anything of the task runs again.
#[test]
fn a_lock_asked_for_by_an_acknowledged_delivery_survives_sigkill() {
    lock_survives_sigkill(None);
}

#[test]
fn a_lock_asked_for_by_an_acknowledged_delivery_survives_sigkill_on_postgres() {
    let pg = Postgres::start();
    lock_survives_sigkill(Some(&pg.new_database()));
}

/// See [`a_lock_asked_for_by_an_acknowledged_delivery_survives_sigkill`]; with `database`, on
/// that PostgreSQL database, the host coming back with a new, empty data dir.
fn lock_survives_sigkill(database: Option<&str>) {
    let held = HeldPort::start(120);
    let oncall = scripted_agent(
        "ops/oncall",
        "capabilities:
  slow: \"*\"
  pager:
    before:
      - assert: \"!has(event) || !event.payload.n.startsWith('bad')\"
        error_message: A bad alert.
        on_fail: lock_task
",
    );
    let manifests = format!(
        "{}{}---\n{oncall}",
        agentmesh_testkit::fixtures::slow_tool("ops", held.port),
        pager_tool("alert {event.payload.n}", None),
    );
    let store = match database {
        Some(_) => "store: {backend: postgres, url: {env: DATABASE_URL}, pool: 4, lease: 2s}\n",
        None => "",
    };
    let (root, dir, data) = dirs(&[
        ("manifests.yaml", &manifests),
        ("host.yaml", &format!("{PAGER_HOST}{store}")),
        (
            "script.yaml",
            "responses:\n  - tool_calls: [{name: slow, arguments: {}}]\n  - text: Done.\n",
        ),
    ]);
    let mut env = vec![("PAGER_SECRET", SECRET)];
    if let Some(url) = database {
        env.push(("DATABASE_URL", url));
    }
    let server = Server::start(AGENTMESH, &dir, &data, &env);
    let id = server.create_task(&json!({"agent": "ops/oncall", "input": {"message": "go"}}));
    held.wait_for(1);
    let answer = deliver(server.addr, "bad-1");
    assert_eq!(answer.as_ref().map(|a| a.0), Some(202), "{answer:?}");
    server.kill();

    let data = match database {
        Some(_) => root.path().join("after"),
        None => data,
    };
    let server = Server::start(AGENTMESH, &dir, &data, &env);
    let ended = server.wait_for_status(&id, "terminated");
    assert_eq!(ended["reason"], "locked", "{ended}");
    let log = server
        .request("GET", &format!("/v1/tasks/{id}/events"))
        .send()
        .text();
    assert!(log.contains("A bad alert."), "the log says why: {log}");
    assert!(
        !log.contains("alert bad-1"),
        "the alert was not taken: {log}"
    );
    assert!(
        !log.contains("Done."),
        "nothing of the task ran again: {log}"
    );
}
