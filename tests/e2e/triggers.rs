//! Triggers, schedules and self-scheduled wakeups over real HTTP: cold starts from a GitHub
//! source and the API, dedupe, throttling and the daily quota (also across a SIGKILL),
//! interval schedules that do not wait for earlier tasks, wakeups (and their cancellation,
//! TTL and survival of a SIGKILL).

use std::path::Path;
use std::time::{Duration, Instant};

use agentmesh_routing::signature::{sign_github, sign_standard_webhooks};
use agentmesh_testkit::client::Response;
use agentmesh_testkit::fixtures::{echo_tool, zeros};
use agentmesh_testkit::server::{RETURN_FREED_MEMORY, Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::webhooks::fixture;

const SECRET: &str = "e2e trigger secret";
const OPS_TOKEN: &str = "e2e ops token";
/// The Standard Webhooks secret of source `ci` (`whsec_` and the base64 of "e2e ci secret").
const CI_SECRET: &str = "whsec_ZTJlIGNpIHNlY3JldA==";

fn env() -> [(&'static str, &'static str); 3] {
    [
        ("E2E_TRIGGER_SECRET", SECRET),
        ("E2E_OPS_TOKEN", OPS_TOKEN),
        ("E2E_CI_SECRET", CI_SECRET),
    ]
}

/// A config dir: sources `github`, `ci` (Standard Webhooks) and `ops` (bearer), agents `lab/triage` (answers at once),
/// `lab/slow` (waits in a review nobody answers) and `lab/sleeper` (requests two wakeups),
/// plus `extra` manifests and host `policy` lines.
fn config(dir: &Path, policy: &str, extra: &str) {
    std::fs::write(
        dir.join("host.yaml"),
        format!(
            "kind: agentmesh/v1/host
sources:
  github: {{signature: github, secret: {{env: E2E_TRIGGER_SECRET}}}}
  ci: {{signature: standard-webhooks, secret: {{env: E2E_CI_SECRET}}}}
  ops: {{signature: bearer, tokens: [{{subject: \"svc:deployer\", env: E2E_OPS_TOKEN}}]}}
{policy}"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("agents.yaml"),
        format!(
            "{echo}---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: triage
description: Triages.
prompt: Triage.
model: scripted/triage.yaml
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: slow
description: Asks before echoing.
prompt: Echo.
model: scripted/slow.yaml
capabilities:
  echo:
    before:
      - assert: \"review('user:ops')\"
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: sleeper
description: Sleeps.
prompt: Sleep.
model: scripted/sleeper.yaml
---
{extra}",
            echo = echo_tool("lab"),
        ),
    )
    .unwrap();
    std::fs::write(dir.join("triage.yaml"), "responses:\n  - text: Triaged.\n").unwrap();
    std::fs::write(
        dir.join("slow.yaml"),
        "responses:\n  - tool_calls: [{name: echo, arguments: {text: hi}}]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("sleeper.yaml"),
        "responses:
  - tool_calls:
      - {name: request_wakeup, arguments: {when: {kind: delay_ms, value: 2000}, prompt: Wake up A, reason: check}}
      - {name: request_wakeup, arguments: {when: {kind: delay_ms, value: 2500}, prompt: Wake up B, reason: check}}
  - text: Sleeping.
",
    )
    .unwrap();
}

const TRIGGERS: &str = "kind: commonagents.info/v1beta2/trigger
namespace: lab
name: new-issues
agent: triage
owner: user:bot@example.com
source:
  type: github
  before:
    - assert: \"event.payload.action == 'opened'\"
message: \"New issue: {event.payload.issue.title}\"
---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: public-repos
agent: triage
owner: user:bot@example.com
source:
  type: github
  before:
    - assert: \"!event.payload.repository.private\"
message: \"Activity in {event.payload.repository.full_name}\"
---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: closed-issues
agent: triage
owner: user:bot@example.com
source:
  type: github
  before:
    - assert: \"event.payload.action == 'closed'\"
message: Closed.
---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: deploy
agent: triage
owner: user:ops@example.com
source: {type: ops}
message: \"Deployed {event.payload.version}\"
throttle: {max_per_hour: 2}
";

fn deliver(server: &Server, delivery: &str, body: &[u8], secret: &str) -> Response {
    server
        .request("POST", "/v1/webhooks/sources/github")
        .header("Content-Type", "application/json")
        .header("X-GitHub-Event", "issues")
        .header("X-GitHub-Delivery", delivery)
        .header("X-Hub-Signature-256", &sign_github(secret, body))
        .body(body.to_vec())
        .send()
}

fn tasks(server: &Server, agent: &str) -> Vec<Value> {
    let r = server
        .request("GET", &format!("/v1/tasks?agent={agent}"))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["tasks"].as_array().unwrap().clone()
}

fn events(server: &Server, task: &str) -> Vec<Value> {
    let r = server
        .request("GET", &format!("/v1/tasks/{task}/events"))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["events"].as_array().unwrap().clone()
}

/// The user messages of a task: (text, metadata.trigger).
fn user_messages(server: &Server, task: &str) -> Vec<(String, Value)> {
    events(server, task)
        .into_iter()
        .filter(|e| e["kind"] == "MessageEvent" && e["source"] == "user")
        .map(|e| {
            (
                e["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["metadata"]["trigger"].clone(),
            )
        })
        .collect()
}

fn schedules(server: &Server, query: &str) -> Vec<Value> {
    let r = server
        .request("GET", &format!("/v1/schedules{query}"))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["schedules"].as_array().unwrap().clone()
}

fn fire(server: &Server, trigger: &str, token: &str, body: &Value) -> Response {
    server
        .request("POST", &format!("/v1/triggers/{trigger}/fire"))
        .header("Authorization", &format!("Bearer {token}"))
        .json(body)
        .send()
}

#[test]
fn github_issue_cold_starts_one_task_per_matching_trigger_and_redelivery_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", TRIGGERS);
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let body = fixture("issues.opened.json");

    let r = deliver(&server, "d-1", &body, "wrong secret");
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(tasks(&server, "lab/triage").is_empty());

    let r = deliver(&server, "d-1", &body, SECRET);
    assert_eq!(r.status, 202, "{}", r.text());
    let created = r.json()["tasks"].as_array().unwrap().clone();
    // new-issues and public-repos pass; closed-issues' `source.before` fails.
    assert_eq!(created.len(), 2, "{created:?}");

    let mut texts = Vec::new();
    for task in tasks(&server, "lab/triage") {
        assert_eq!(task["owner"], "user:bot@example.com", "runs as the owner");
        let id = task["id"].as_str().unwrap();
        let messages = wait_for(Duration::from_secs(10), || {
            let m = user_messages(&server, id);
            (!m.is_empty()).then_some(m)
        })
        .expect("the trigger's message is processed");
        let (text, trigger) = &messages[0];
        assert_eq!(trigger["source"], "webhook");
        assert_eq!(trigger["delivery_id"], "d-1");
        assert!(trigger["fired_at"].as_i64().is_some());
        texts.push(text.clone());
    }
    texts.sort();
    assert_eq!(
        texts,
        [
            "Activity in Codertocat/Hello-World",
            "New issue: Spelling error in the README file"
        ]
    );

    let r = deliver(&server, "d-1", &body, SECRET);
    assert_eq!(r.status, 200, "a redelivery is a duplicate: {}", r.text());
    assert_eq!(tasks(&server, "lab/triage").len(), 2, "and creates nothing");

    let status = server
        .request("GET", "/v1/triggers/lab/new-issues")
        .send()
        .json();
    assert_eq!(status["status"]["total_triggers"], 1);
    assert!(created.contains(&status["status"]["last_task_id"]));
    assert!(status["status"]["last_triggered_at"].is_string());
    let closed = server
        .request("GET", "/v1/triggers/lab/closed-issues")
        .send()
        .json();
    assert_eq!(closed["status"]["total_triggers"], 0);
    let all = server.request("GET", "/v1/triggers").send().json();
    assert_eq!(all["triggers"].as_array().unwrap().len(), 4);
}

/// Triggers without `message`, one fired over the API and one by a GitHub delivery.
const SILENT_TRIGGERS: &str = "kind: commonagents.info/v1beta2/trigger
namespace: lab
name: ping
agent: triage
owner: user:ops@example.com
source: {type: ops}
---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: any-issue
agent: triage
owner: user:bot@example.com
source: {type: github}
";

#[test]
fn a_trigger_without_message_creates_its_task_with_no_initial_message() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", SILENT_TRIGGERS);
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());

    let r = fire(&server, "lab/ping", OPS_TOKEN, &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
    let fired = r.json()["task_id"].as_str().unwrap().to_owned();
    let body = br#"{"action": "opened", "issue": {"title": "T"}}"#;
    let r = deliver(&server, "d-silent", body, SECRET);
    assert_eq!(r.status, 202, "{}", r.text());
    let delivered = wait_for(Duration::from_secs(10), || {
        tasks(&server, "lab/triage")
            .into_iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .find(|id| *id != fired)
    })
    .expect("the delivery created a task");
    for task in [fired, delivered] {
        // The turn runs on the agent's prompt alone.
        let answered = wait_for(Duration::from_secs(10), || {
            let record = server
                .request("GET", &format!("/v1/tasks/{task}"))
                .send()
                .json();
            (record["output"][0]["message"][0]["text"] == "Triaged.").then_some(())
        });
        assert!(answered.is_some(), "{task} never answered");
        let log = events(&server, &task);
        assert!(
            log.iter()
                .any(|e| e["key"] == "triggered" && e["value"]["trigger"].is_object()),
            "the log says what fired {task}: {log:?}"
        );
        assert!(
            user_messages(&server, &task).is_empty(),
            "no initial message in {task}: {:?}",
            events(&server, &task)
        );
    }
}

/// A fire's fields set the agent's parameters the trigger leaves open, never those its
/// `inputs` fix: a source token does not choose the environment the trigger's owner fixed.
#[test]
fn an_api_fire_cannot_change_what_the_trigger_fixes() {
    let ship = "kind: commonagents.info/v1beta2/agent
namespace: lab
name: shipper
description: Ships.
prompt: \"Ship {context.input[0].version} to {context.input[0].environment}.\"
model: scripted/triage.yaml
parameters:
  type: object
  properties:
    environment: {type: string}
    version: {type: string, default: latest}
---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: ship
agent: shipper
owner: user:ops@example.com
source: {type: ops}
inputs: {environment: staging}
message: Ship it.
";
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", ship);
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let body = json!({"version": "2.0", "environment": "production"});
    let r = fire(&server, "lab/ship", OPS_TOKEN, &body);
    assert_eq!(r.status, 202, "{}", r.text());
    let task = r.json()["task_id"].as_str().unwrap().to_owned();
    let prompt = server.wait_for_event(&task, "SystemPromptEvent");
    assert_eq!(prompt["prompt"], "Ship 2.0 to staging.", "{prompt}");
}

/// A body is charged for one parsed tree of its JSON. A fire's was parsed, copied whole for
/// the event, and its fields copied again for the task's input and its normalization.
#[test]
fn an_api_fire_takes_no_more_memory_than_it_was_charged() {
    let collect = "kind: commonagents.info/v1beta2/agent
namespace: lab
name: collector
description: Collects.
prompt: Collect.
model: scripted/triage.yaml
parameters:
  type: object
  properties:
    data: {type: array, default: []}
---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: collect
agent: collector
owner: user:ops@example.com
source: {type: ops, before: [{assert: \"size(event.payload.data) > 0\"}]}
throttle: {max_per_hour: 1}
";
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "policy: {max_body_memory: 64MiB}", collect);
    let [a, b, c] = env();
    let vars = [a, b, c, RETURN_FREED_MEMORY];
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &vars);
    let r = fire(
        &server,
        "lab/collect",
        OPS_TOKEN,
        &json!({"message": "one", "data": [0]}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    let task = r.json()["task_id"].as_str().unwrap().to_owned();
    server.wait_for_status(&task, "idle");
    // Charged ~59 MB of the 64 MiB, as a routed body of the same zeros is. The hourly cap is
    // reached: the fire goes all the way through the trigger and creates no task to run.
    let mut body = br#"{"message": "two", "data": "#.to_vec();
    body.extend(zeros(262_145));
    body.push(b'}');
    let fire = server
        .request("POST", "/v1/triggers/lab/collect/fire")
        .header("Authorization", &format!("Bearer {OPS_TOKEN}"))
        .header("Content-Type", "application/json")
        .body(body);
    let r = server.grows_less_than(64 * 1024, || fire.send());
    assert_eq!(r.status, 429, "{}", r.text());
}

#[test]
fn api_fire_needs_the_sources_token_and_drops_fires_over_the_hourly_cap() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", TRIGGERS);
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());

    let r = fire(
        &server,
        "lab/deploy",
        "not the token",
        &json!({"version": "1.0"}),
    );
    assert_eq!(r.status, 401, "{}", r.text());
    let r = fire(&server, "lab/new-issues", OPS_TOKEN, &json!({}));
    assert_eq!(
        r.status, 401,
        "a github-source trigger is not fired over the API"
    );
    assert!(
        tasks(&server, "lab/triage").is_empty(),
        "a refused fire creates nothing"
    );

    let r = fire(&server, "lab/deploy", OPS_TOKEN, &json!({"version": "1.0"}));
    assert_eq!(r.status, 202, "{}", r.text());
    let task = r.json()["task_id"].as_str().unwrap().to_owned();
    let messages = wait_for(Duration::from_secs(10), || {
        let m = user_messages(&server, &task);
        (!m.is_empty()).then_some(m)
    })
    .unwrap();
    assert_eq!(messages[0].0, "Deployed 1.0");
    assert_eq!(messages[0].1["source"], "api");
    assert_eq!(messages[0].1["auth_subject"], "svc:deployer");
    let record = server
        .request("GET", &format!("/v1/tasks/{task}"))
        .send()
        .json();
    assert_eq!(record["owner"], "user:ops@example.com");

    assert_eq!(
        fire(&server, "lab/deploy", OPS_TOKEN, &json!({"version": "1.1"})).status,
        202
    );
    let r = fire(&server, "lab/deploy", OPS_TOKEN, &json!({"version": "1.2"}));
    assert_eq!(
        r.status,
        429,
        "the third fire in an hour is over the cap: {}",
        r.text()
    );
    assert_eq!(
        tasks(&server, "lab/triage").len(),
        2,
        "a dropped fire is never queued"
    );
    let status = server
        .request("GET", "/v1/triggers/lab/deploy")
        .send()
        .json();
    assert_eq!(status["status"]["total_triggers"], 2);
    assert_eq!(status["status"]["dropped"], 1, "the drop is recorded");
}

/// An API fire with a delivery id is taken once; one the trigger refuses (over its hourly
/// cap) leaves the id unremembered, so its retry is refused again rather than called a
/// duplicate.
#[test]
fn an_api_fires_delivery_id_is_remembered_only_when_the_fire_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", TRIGGERS);
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let fire_once = |id: &str, version: &str| {
        server
            .request("POST", "/v1/triggers/lab/deploy/fire")
            .header("Authorization", &format!("Bearer {OPS_TOKEN}"))
            .header("X-Delivery-Id", id)
            .json(&json!({ "version": version }))
            .send()
    };
    assert_eq!(fire_once("f-1", "1.0").status, 202);
    let again = fire_once("f-1", "1.0");
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["status"], "duplicate");
    assert_eq!(fire_once("f-2", "1.1").status, 202);
    // Over the cap of two an hour: refused, twice, whatever the id.
    for _ in 0..2 {
        let r = fire_once("f-3", "1.2");
        assert_eq!(r.status, 429, "{}", r.text());
    }
    assert_eq!(
        tasks(&server, "lab/triage").len(),
        2,
        "one task per fire taken"
    );
}

/// A trigger of the Standard Webhooks source `ci`.
const CI_TRIGGER: &str = "kind: commonagents.info/v1beta2/trigger
namespace: lab
name: builds
agent: triage
owner: user:ci@example.com
source: {type: ci}
message: Built.
";

#[test]
fn a_signed_delivery_replayed_with_a_new_unsigned_delivery_header_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", CI_TRIGGER);
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let body = br#"{"build": 7}"#;
    let sent_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .cast_signed();
    let signature = sign_standard_webhooks(CI_SECRET, "msg_1", sent_at, body).unwrap();
    // The signature covers `webhook-id`, the timestamp and the body; `X-GitHub-Delivery` is
    // no part of it, so anyone holding the request can set it.
    let send = |github_delivery: Option<&str>| {
        let request = server
            .request("POST", "/v1/webhooks/sources/ci")
            .header("Content-Type", "application/json")
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", &sent_at.to_string())
            .header("webhook-signature", &signature);
        match github_delivery {
            Some(id) => request.header("X-GitHub-Delivery", id),
            None => request,
        }
        .body(body.to_vec())
        .send()
    };
    let r = send(None);
    assert_eq!(r.status, 202, "{}", r.text());
    for replay in ["replay-1", "replay-2"] {
        let r = send(Some(replay));
        assert_eq!(
            r.status,
            200,
            "a replay is a duplicate of `msg_1`: {}",
            r.text()
        );
        assert_eq!(r.json()["status"], "duplicate");
    }
    assert_eq!(
        tasks(&server, "lab/triage").len(),
        1,
        "one task for one message"
    );
}

#[test]
fn a_delivery_id_named_at_one_entrance_does_not_stop_the_same_id_at_another() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", TRIGGERS);
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    // A holder of the `ops` token names an id the `github` source will send later.
    let r = server
        .request("POST", "/v1/triggers/lab/deploy/fire")
        .header("Authorization", &format!("Bearer {OPS_TOKEN}"))
        .header("X-Delivery-Id", "d-shared")
        .json(&json!({"version": "1.0"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    let r = deliver(&server, "d-shared", &fixture("issues.opened.json"), SECRET);
    assert_eq!(r.status, 202, "GitHub's delivery is its own: {}", r.text());
    assert_eq!(
        r.json()["tasks"].as_array().unwrap().len(),
        2,
        "{}",
        r.text()
    );
    let again = deliver(&server, "d-shared", &fixture("issues.opened.json"), SECRET);
    assert_eq!(
        again.status,
        200,
        "and its redelivery a duplicate: {}",
        again.text()
    );
}

#[test]
fn interval_schedule_creates_a_task_every_tick_while_earlier_ones_still_run() {
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        "",
        "kind: commonagents.info/v1/schedule
namespace: lab
name: tick
agent: slow
owner: user:ops@example.com
interval: 2s
inputs:
  message: Tick.
",
    );
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let all = wait_for(Duration::from_secs(12), || {
        let t = tasks(&server, "lab/slow");
        (t.len() >= 3).then_some(t)
    })
    .expect("three ticks within 12 s");
    // The first tick's task still waits in its review: the later ticks did not wait for it.
    let mut fired: Vec<i64> = Vec::new();
    for task in &all {
        let id = task["id"].as_str().unwrap();
        let (_, trigger) = wait_for(Duration::from_secs(5), || {
            user_messages(&server, id).into_iter().next()
        })
        .unwrap();
        assert_eq!(trigger["source"], "schedule");
        assert_eq!(trigger["schedule_id"], "lab/tick");
        fired.push(trigger["fired_at"].as_i64().unwrap());
    }
    fired.sort_unstable();
    let first = fired[0];
    let first_task = all
        .iter()
        .find(|t| {
            user_messages(&server, t["id"].as_str().unwrap())
                .first()
                .is_some_and(|(_, tr)| tr["fired_at"] == first)
        })
        .unwrap();
    let first_now = server
        .request(
            "GET",
            &format!("/v1/tasks/{}", first_task["id"].as_str().unwrap()),
        )
        .send()
        .json();
    assert_eq!(
        first_now["status"], "waiting",
        "the earliest task is still in its turn"
    );
    for pair in fired.windows(2).take(2) {
        let gap = pair[1] - pair[0];
        assert!(
            (1_500..=2_700).contains(&gap),
            "ticks 2 s apart, got {gap} ms"
        );
    }
    let listed = schedules(&server, "");
    let tick = listed.iter().find(|s| s["id"] == "lab/tick").unwrap();
    assert!(tick["next_trigger_at"].is_string());
    assert!(tick["status"]["total_triggers"].as_u64().unwrap() >= 3);
}

#[test]
fn throttle_and_daily_quota_still_apply_after_a_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        "policy:\n  triggered_turns_per_user_per_day: 3\n",
        &format!(
            "{TRIGGERS}---
kind: commonagents.info/v1beta2/trigger
namespace: lab
name: release
agent: triage
owner: user:ops@example.com
source: {{type: ops}}
message: \"Released {{event.payload.version}}\"
"
        ),
    );
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &env());
    for version in ["1.0", "1.1"] {
        let r = fire(
            &server,
            "lab/deploy",
            OPS_TOKEN,
            &json!({"version": version}),
        );
        assert_eq!(r.status, 202, "{}", r.text());
    }
    server.kill();

    // `lab/deploy` has had its 2 fires this hour, `user:ops@example.com` 2 of its 3 turns today.
    let server = Server::start(AGENTMESH, dir.path(), &data, &env());
    let r = fire(&server, "lab/deploy", OPS_TOKEN, &json!({"version": "1.2"}));
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("fires per hour"), "{}", r.text());
    let r = fire(
        &server,
        "lab/release",
        OPS_TOKEN,
        &json!({"version": "2.0"}),
    );
    assert_eq!(r.status, 202, "the third turn of the day: {}", r.text());
    server.kill();

    let server = Server::start(AGENTMESH, dir.path(), &data, &env());
    let r = fire(
        &server,
        "lab/release",
        OPS_TOKEN,
        &json!({"version": "2.1"}),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("trigger-fired turns"), "{}", r.text());
    assert_eq!(
        tasks(&server, "lab/triage").len(),
        3,
        "dropped fires are never queued"
    );
}

/// Creates a `lab/sleeper` task (it requests wakeups A in 2 s and B in 2.5 s) and waits until
/// its first turn is done.
fn sleeper(server: &Server) -> String {
    let r = server
        .request("POST", "/v1/tasks")
        .json(&json!({"agent": "lab/sleeper", "input": {"message": "Sleep."}}))
        .send();
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    server.wait_answered(&id, Duration::from_secs(10), "the first turn finishes");
    id
}

fn wakeup_messages(server: &Server, task: &str) -> Vec<(String, Value)> {
    user_messages(server, task)
        .into_iter()
        .filter(|(_, t)| t["source"] == "self-schedule")
        .collect()
}

#[test]
fn wakeup_arrives_in_the_same_task_and_a_cancelled_one_never_does() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", "");
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let task = sleeper(&server);
    let pending = schedules(&server, &format!("?task={task}"));
    assert_eq!(pending.len(), 2, "{pending:?}");
    let b = pending.iter().find(|w| w["prompt"] == "Wake up B").unwrap();
    let b_id = b["id"].as_str().unwrap();
    let r = server
        .request("DELETE", &format!("/v1/schedules/{b_id}"))
        .send();
    assert_eq!(r.status, 204, "{}", r.text());

    let woken = wait_for(Duration::from_secs(8), || {
        let w = wakeup_messages(&server, &task);
        (!w.is_empty()).then_some(w)
    })
    .expect("wakeup A arrives");
    assert_eq!(woken[0].0, "Wake up A");
    let a_id = pending.iter().find(|w| w["prompt"] == "Wake up A").unwrap()["id"].clone();
    assert_eq!(woken[0].1["schedule_id"], a_id);
    std::thread::sleep(Duration::from_secs(2));
    let all = wakeup_messages(&server, &task);
    assert_eq!(all.len(), 1, "the cancelled wakeup never fires: {all:?}");
    assert!(schedules(&server, &format!("?task={task}")).is_empty());
}

#[test]
fn self_schedule_past_its_ttl_fires_once_more_and_disappears() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "policy: {trigger_ttl: 3s}\n", "");
    std::fs::write(
        dir.path().join("sleeper.yaml"),
        "responses:
  - tool_calls:
      - {name: request_wakeup, arguments: {when: {kind: delay_ms, value: 600000}, prompt: Much later, reason: ttl}}
  - text: Sleeping.
",
    )
    .unwrap();
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let started = Instant::now();
    let task = sleeper(&server);
    let pending = schedules(&server, &format!("?task={task}"));
    assert_eq!(pending.len(), 1);
    let woken = wait_for(Duration::from_secs(10), || {
        let w = wakeup_messages(&server, &task);
        (!w.is_empty()).then_some(w)
    })
    .expect("the wakeup fires its final time at its TTL");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(woken[0].0, "Much later");
    assert!(
        schedules(&server, &format!("?task={task}")).is_empty(),
        "and deletes itself"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(wakeup_messages(&server, &task).len(), 1);
}

#[test]
fn schedules_and_pending_wakeups_survive_sigkill_and_fire_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let at = agentmesh_timing::clock::rfc3339(agentmesh_timing::clock::now_ms() + 6_000);
    config(
        dir.path(),
        "",
        &format!(
            "kind: commonagents.info/v1/schedule
namespace: lab
name: once
agent: triage
owner: user:ops@example.com
at: \"{at}\"
inputs:
  message: Once.
"
        ),
    );
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &env());
    let task = sleeper(&server);
    assert_eq!(schedules(&server, &format!("?task={task}")).len(), 2);
    assert!(tasks(&server, "lab/triage").is_empty());
    server.kill();

    // Down past both wakeups and the schedule's `at`.
    std::thread::sleep(Duration::from_secs(7));
    let server = Server::start(AGENTMESH, dir.path(), &data, &env());
    let woken = wait_for(Duration::from_secs(10), || {
        let w = wakeup_messages(&server, &task);
        (w.len() == 2).then_some(w)
    })
    .expect("both pending wakeups fire after the restart");
    let mut prompts: Vec<&str> = woken.iter().map(|(t, _)| t.as_str()).collect();
    prompts.sort_unstable();
    assert_eq!(prompts, ["Wake up A", "Wake up B"]);
    let scheduled = wait_for(Duration::from_secs(10), || {
        let t = tasks(&server, "lab/triage");
        (!t.is_empty()).then_some(t)
    })
    .expect("the missed `at` tick fires at start");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(scheduled.len(), 1);
    assert_eq!(
        tasks(&server, "lab/triage").len(),
        1,
        "the missed tick fires once"
    );
    assert_eq!(
        wakeup_messages(&server, &task).len(),
        2,
        "each wakeup fires once"
    );
    assert!(schedules(&server, &format!("?task={task}")).is_empty());
}

#[test]
fn deleting_a_task_deletes_its_wakeups() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "", "");
    let server = Server::start(AGENTMESH, dir.path(), &dir.path().join("data"), &env());
    let task = sleeper(&server);
    assert_eq!(schedules(&server, &format!("?task={task}")).len(), 2);
    let r = server
        .request("DELETE", &format!("/v1/tasks/{task}"))
        .send();
    assert_eq!(r.status, 204);
    assert!(schedules(&server, "").is_empty());
    std::thread::sleep(Duration::from_secs(3));
    assert!(wakeup_messages(&server, &task).is_empty());
}

/// `validate` says what keeps each source from letting deliveries in, at its place: a field of
/// the other kind of source, a missing or empty secret, a variable not set or empty, no
/// tokens, no kind at all. The host compiles the same resolution, so a config that passes
/// serves its sources.
#[test]
fn validate_says_what_keeps_each_source_from_letting_deliveries_in() {
    let host = "kind: agentmesh/v1/host
sources:
  gh: {signature: github, secret: {env: AM_SECRET}, tokens: [{subject: a, env: AM_TOKEN}]}
  bare: {signature: github}
  hollow: {signature: github, secret: {env: AM_EMPTY}}
  ops:
    signature: bearer
    secret: x
    tokens:
      - {subject: ci, env: AM_EMPTY}
      - {subject: bot, env: AM_UNSET}
  nobody: {signature: bearer}
  what: {}
";
    let (_root, dir, _data) = agentmesh_testkit::fixtures::dirs(&[("host.yaml", host)]);
    let vars = [
        ("AM_SECRET", "s3cret"),
        ("AM_TOKEN", "t0ken"),
        ("AM_EMPTY", ""),
    ];
    let env = crate::util::Env {
        cwd: None,
        vars: &vars,
    };
    let (code, out, err) = crate::util::agentmesh_in(&env, &["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    let said = format!("{out}{err}");
    let expected = [
        "host.yaml:3:53: error: source `gh` is signed: it checks a `secret`, not `tokens` (those are a `bearer` source's)",
        "host.yaml:4:10: error: source `bare` is signed but has no `secret` (e.g. `secret: {env: WEBHOOK_SECRET}`)",
        "host.yaml:5:40: error: source `hollow`: the secret is empty, and every delivery would be refused",
        "host.yaml:8:5: error: source `ops` takes bearer `tokens`, not a `secret` (that is a signed source's)",
        "host.yaml:10:28: error: source `ops`, token `ci`: environment variable `AM_EMPTY` is empty",
        "host.yaml:11:29: error: source `ops`, token `bot`: environment variable `AM_UNSET` is not set",
        "host.yaml:12:12: error: source `nobody` accepts bearer tokens but names none",
        "host.yaml:13:10: error: source `what` needs a `signature` (github, standard-webhooks or bearer), or `mcp` for MCP resource updates",
    ];
    for line in expected {
        assert!(said.contains(line), "missing {line:?} in:\n{said}");
    }
    assert_eq!(
        said.lines().count(),
        expected.len(),
        "only those errors:\n{said}"
    );

    // The sources that resolve, alone: the config passes, and the host compiles them.
    let fine = "kind: agentmesh/v1/host
sources:
  gh: {signature: github, secret: {env: AM_SECRET}}
  ops: {signature: bearer, tokens: [{subject: ci, env: AM_TOKEN}]}
";
    std::fs::write(dir.join("host.yaml"), fine).unwrap();
    let (code, out, err) = crate::util::agentmesh_in(&env, &["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
}
