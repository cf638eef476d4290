//! `agentmesh serve` and tool webhooks: the spec's github-pr scenario end to end, with real
//! GitHub payloads (`../shared/fixtures/github/`) signed with HMAC by the test.

use std::path::Path;
use std::time::Duration;

use agentmesh_routing::signature::sign_github;
use agentmesh_testkit::client::{Request, Response};
use agentmesh_testkit::fixtures::dirs;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::wasm::guest;

const SECRET: &str = "e2e webhook secret";

/// The fixture `name`, byte for byte.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/github")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `bytes` with every `"login": "from"` replaced by `"login": "to"` (a payload for another
/// user; the test signs what it sends).
pub fn with_login(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .replace(
            &format!("\"login\": \"{from}\""),
            &format!("\"login\": \"{to}\""),
        )
        .into_bytes()
}

/// Posts `body` to the github-pr tool's webhook as GitHub would, signed with the secret.
fn deliver(server: &Server, event: &str, delivery: &str, body: &[u8]) -> Response {
    signed_delivery(
        server,
        "engineering/github-pr",
        event,
        delivery,
        body,
        SECRET,
    )
    .send()
}

/// The request that posts `body` to `tool`'s webhook as GitHub would, signed with `secret`.
fn signed_delivery(
    server: &Server,
    tool: &str,
    event: &str,
    delivery: &str,
    body: &[u8],
    secret: &str,
) -> Request {
    server
        .request("POST", &format!("/v1/webhooks/tools/{tool}"))
        .header("Content-Type", "application/json")
        .header("X-GitHub-Event", event)
        .header("X-GitHub-Delivery", delivery)
        .header("X-Hub-Signature-256", &sign_github(secret, body))
        .body(body.to_vec())
}

/// The config: the github-pr tool (a `cel` backend: this scenario is about routing) and
/// agents over it.
fn config(dir: &Path, scripts: &[(&str, &str)]) {
    std::fs::write(
        dir.join("host.yaml"),
        "kind: agentmesh/v1/host
settings:
  engineering:
    github-pr:
      github_webhook_secret: {env: E2E_GITHUB_SECRET}
",
    )
    .unwrap();
    let tool = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/github-pr/github-pr.yaml"),
    )
    .unwrap();
    // Same manifest, events and all; the actions answer from CEL instead of GitHub.
    let tool = tool
        .replace(
            "wasm:\n  component: ../target/wasm32-wasip2/release/github_pr.wasm\n  allowed_hosts: [\"https://api.github.com\"]\n  memory_limit: 64MiB\n  timeout: 10s\n  max_output: 1MiB\n",
            "",
        )
        .replace(
            "      required: [title, head]\n",
            "      required: [title, head]\n    execute:\n      cel: {expression: \"{'number': 3, 'author': input.author}\"}\n",
        )
        .replace(
            "      required: [number, body]\n",
            "      required: [number, body]\n    execute:\n      cel: {expression: \"{'ok': true}\"}\n",
        )
        .replace(
            "      properties:\n        state: {type: string, enum: [open, closed, all], default: open}\n",
            "      properties:\n        state: {type: string, enum: [open, closed, all], default: open}\n    execute:\n      cel: {expression: \"[]\"}\n",
        );
    assert!(!tool.contains("wasm:"), "the tool manifest changed shape");
    std::fs::write(dir.join("github-pr.yaml"), tool).unwrap();
    for (name, script) in scripts {
        std::fs::write(dir.join(format!("{name}.script.yaml")), script).unwrap();
    }
}

fn agent(name: &str, owner: &str, repo: &str, capability: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/agent
namespace: engineering
name: {name}
description: Works on pull requests.
prompt: You open pull requests.
model: scripted/{name}.script.yaml
capabilities:
  github-pr:
    bindings:
      owner: \"'{owner}'\"
      repo: \"'{repo}'\"
{capability}"
    )
}

fn start(dir: &Path, data: &Path) -> Server {
    Server::start(AGENTMESH, dir, data, &[("E2E_GITHUB_SECRET", SECRET)])
}

fn create_task(server: &Server, agent: &str, message: &str) -> Value {
    let r = server
        .request("POST", "/v1/tasks")
        .json(&json!({"agent": agent, "input": {"message": message}, "user": {"id": "user:dev@example.com"}}))
        .send();
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()
}

fn task(server: &Server, id: &str) -> Value {
    let r = server.request("GET", &format!("/v1/tasks/{id}")).send();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn events(server: &Server, id: &str) -> Vec<Value> {
    let r = server
        .request("GET", &format!("/v1/tasks/{id}/events"))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["events"].as_array().unwrap().clone()
}

/// A new task of `agent` (`namespace/name`) told `message`, once its first turn is done and it
/// waits for events; its id.
fn watching(server: &Server, agent: &str, message: &str) -> String {
    let id = create_task(server, agent, message)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    settle(server, &id);
    id
}

/// Waits until task `id` is idle with an empty queue, and returns it.
fn settle(server: &Server, id: &str) -> Value {
    wait_for(Duration::from_secs(30), || {
        let t = task(server, id);
        (t["status"] != "running" && t["queue_depth"] == 0).then_some(t)
    })
    .unwrap_or_else(|| panic!("task {id} did not settle: {}", task(server, id)))
}

/// The user messages that webhooks queued on task `id`: (delivery id, text).
fn webhook_messages(server: &Server, id: &str) -> Vec<(String, String)> {
    events(server, id)
        .iter()
        .filter(|e| e["kind"] == "MessageEvent" && e["source"] == "user")
        .filter(|e| e["metadata"]["trigger"]["source"] == "webhook")
        .map(|e| {
            (
                e["metadata"]["trigger"]["delivery_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

const MERGED: &str = "pull_request.closed.merged.json";
const MERGED_REPO: (&str, &str) = ("ailisp", "gcbapp-buildconfig-example");
const MERGED_AUTHOR: &str = "byao1276";

#[test]
fn author_allow_list_grows_with_create_pr_calls() {
    let (_root, dir, data) = dirs(&[]);
    config(
        &dir,
        &[(
            "opener",
            "responses:
  - tool_calls: [{name: github_pr_create_pr, arguments: {title: Fix, head: fix, author: alice}}]
  - text: Opened a PR for alice.
  - text: Alice's PR was merged.
  - tool_calls: [{name: github_pr_create_pr, arguments: {title: Docs, head: docs, author: bob}}]
  - text: Opened a PR for bob.
  - text: Bob's PR was merged.
",
        )],
    );
    let (owner, repo) = MERGED_REPO;
    std::fs::write(dir.join("opener.yaml"), agent("opener", owner, repo, "")).unwrap();
    let server = start(&dir, &data);
    let id = create_task(&server, "engineering/opener", "Open a PR for alice")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = settle(&server, &id);
    assert_eq!(
        t["allow_list"]["engineering/github-pr"]["author"],
        json!(["alice"]),
        "{t}"
    );
    assert_eq!(
        t["allow_list"]["engineering/github-pr"]["owner"],
        json!([owner]),
        "bindings seal owner at task start: {t}"
    );
    let subs: Vec<&str> = t["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["event"].as_str().unwrap())
        .collect();
    assert_eq!(subs, ["comment", "review", "pr_merged"], "{t}");

    let merged = fixture(MERGED);
    let alice = with_login(&merged, MERGED_AUTHOR, "alice");
    let carol = with_login(&merged, MERGED_AUTHOR, "carol");
    let bob = with_login(&merged, MERGED_AUTHOR, "bob");

    let r = deliver(&server, "pull_request", "d-alice", &alice);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["tasks"], 1);
    let r = deliver(&server, "pull_request", "d-carol", &carol);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["tasks"], 0, "carol is in no allow list");
    let r = deliver(&server, "pull_request", "d-bob-1", &bob);
    assert_eq!(r.json()["tasks"], 0, "bob is not in the allow list yet");
    settle(&server, &id);
    let got = webhook_messages(&server, &id);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "d-alice");
    assert_eq!(got[0].1, "PR #3 by alice was merged.");

    // A second call grows the set.
    let r = server
        .request("POST", &format!("/v1/tasks/{id}/input"))
        .json(&json!({"message": "Now one for bob"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    let t = wait_for(Duration::from_secs(30), || {
        let t = task(&server, &id);
        (t["allow_list"]["engineering/github-pr"]["author"] == json!(["alice", "bob"])).then_some(t)
    });
    assert!(t.is_some(), "{}", task(&server, &id));
    settle(&server, &id);
    let r = deliver(&server, "pull_request", "d-bob-2", &bob);
    assert_eq!(r.json()["tasks"], 1, "{}", r.text());
    settle(&server, &id);
    let got: Vec<String> = webhook_messages(&server, &id)
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    assert_eq!(got, ["d-alice", "d-bob-2"]);
}

/// A delivery that no subscription matched is not remembered: sent again (say, once a task
/// subscribed), it is routed afresh instead of being called a duplicate.
#[test]
fn a_delivery_that_matched_nothing_is_not_remembered() {
    let (_root, dir, data) = dirs(&[]);
    config(&dir, &[]);
    let server = start(&dir, &data);
    let merged = fixture(MERGED);
    for _ in 0..2 {
        let r = deliver(&server, "pull_request", "d-nobody", &merged);
        assert_eq!(r.status, 202, "{}", r.text());
        assert_eq!(r.json()["tasks"], 0, "{}", r.text());
    }
}

#[test]
fn include_excludes_events_and_duplicates_and_bad_signatures_queue_nothing() {
    let (_root, dir, data) = dirs(&[]);
    // Both agents open a PR for the merged fixture's author, so both have `author` in their
    // allow lists; only `wide` subscribes to `pr_merged`.
    let opens = format!(
        "responses:
  - tool_calls: [{{name: github_pr_create_pr, arguments: {{title: Fix, head: fix, author: {MERGED_AUTHOR}}}}}]
  - text: Opened.
"
    );
    config(&dir, &[("narrow", &opens), ("wide", &opens)]);
    let (owner, repo) = MERGED_REPO;
    std::fs::write(
        dir.join("narrow.yaml"),
        agent("narrow", owner, repo, "    include: [create_pr, comment]\n"),
    )
    .unwrap();
    std::fs::write(dir.join("wide.yaml"), agent("wide", owner, repo, "")).unwrap();
    let server = start(&dir, &data);
    let narrow = create_task(&server, "engineering/narrow", "hello")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let wide = create_task(&server, "engineering/wide", "hello")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    settle(&server, &narrow);
    settle(&server, &wide);
    let subs: Vec<Value> = task(&server, &narrow)["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["event"].clone())
        .collect();
    assert_eq!(
        subs,
        [json!("comment")],
        "include keeps the `comment` event only"
    );

    let merged = fixture(MERGED);
    let r = deliver(&server, "pull_request", "d-merged", &merged);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["tasks"], 1, "{}", r.text());
    settle(&server, &narrow);
    settle(&server, &wide);
    assert!(
        webhook_messages(&server, &narrow).is_empty(),
        "`include` excludes pr_merged"
    );
    assert_eq!(webhook_messages(&server, &wide).len(), 1);
    // Bad signature: 401, nothing queued.
    let r = signed_delivery(
        &server,
        "engineering/github-pr",
        "pull_request",
        "d-bad",
        &merged,
        "wrong secret",
    )
    .send();
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "unauthorized");
    let r = server
        .request("POST", "/v1/webhooks/tools/engineering/github-pr")
        .header("X-GitHub-Delivery", "d-unsigned")
        .body(merged)
        .send();
    assert_eq!(r.status, 401, "unsigned: {}", r.text());

    // A comment on the repository reaches both tasks: `wide` by default, `narrow` through include.
    let comment = String::from_utf8(fixture("issue_comment.created.json"))
        .unwrap()
        .replace("\"Codertocat\"", &format!("\"{owner}\""))
        .replace("\"Hello-World\"", &format!("\"{repo}\""))
        .into_bytes();
    let r = deliver(&server, "issue_comment", "d-comment", &comment);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["tasks"], 2);
    // The same delivery again: 200, queued once.
    let r = deliver(&server, "issue_comment", "d-comment", &comment);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["status"], "duplicate");
    settle(&server, &narrow);
    settle(&server, &wide);
    for id in [&narrow, &wide] {
        let got: Vec<String> = webhook_messages(&server, id)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        assert_eq!(
            got.iter().filter(|d| *d == "d-comment").count(),
            1,
            "{id}: {got:?}"
        );
        assert!(
            !got.iter().any(|d| d == "d-bad" || d == "d-unsigned"),
            "refused deliveries queue nothing: {got:?}"
        );
    }
    // Not JSON (but signed): 400.
    let r = signed_delivery(
        &server,
        "engineering/github-pr",
        "issue_comment",
        "d-nojson",
        b"not json",
        SECRET,
    )
    .send();
    assert_eq!(r.status, 400, "{}", r.text());
    // Unknown tool: 404.
    let r = signed_delivery(
        &server,
        "engineering/nope",
        "issue_comment",
        "d-x",
        &comment,
        SECRET,
    )
    .send();
    assert_eq!(r.status, 404, "{}", r.text());
    let metrics = server.request("GET", "/metrics").send().text();
    assert!(
        metrics.contains("agentmesh_webhooks_total{result=\"duplicate\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("agentmesh_webhooks_total{result=\"unauthorized\"} 2"),
        "{metrics}"
    );
}

#[test]
fn before_drops_bot_comments_and_after_transforms_the_message() {
    let (_root, dir, data) = dirs(&[]);
    config(&dir, &[("triage", "responses: []\n")]);
    std::fs::write(
        dir.join("triage.yaml"),
        agent(
            "triage",
            "Codertocat",
            "Hello-World",
            "    before:
      - assert: \"!has(event) || !event.payload.comment.user.login.endsWith('[bot]')\"
    after:
      - condition: \"has(event)\"
        transform: \"'[ACTION REQUIRED] ' + input.message\"
",
        ),
    )
    .unwrap();
    let server = start(&dir, &data);
    let id = watching(&server, "engineering/triage", "watch the repo");
    let human = fixture("issue_comment.created.json");
    // The same comment written by a bot: only the comment's author changes (the repository
    // owner has the same login), so edit that object's login in the raw text.
    let bot_comment = {
        let text = String::from_utf8(human.clone()).unwrap();
        let login = "\"login\": \"Codertocat\"";
        let at = text.find("\"comment\": {").unwrap();
        let user = at + text[at..].find(login).unwrap();
        let mut edited = text;
        edited.replace_range(user..user + login.len(), "\"login\": \"dependabot[bot]\"");
        edited.into_bytes()
    };
    let r = deliver(&server, "issue_comment", "d-bot", &bot_comment);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        r.json()["tasks"],
        0,
        "the bot's comment is dropped by `before`"
    );
    let r = deliver(&server, "issue_comment", "d-human", &human);
    assert_eq!(r.json()["tasks"], 1, "{}", r.text());
    settle(&server, &id);
    let got = webhook_messages(&server, &id);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0].1,
        "[ACTION REQUIRED] Codertocat commented on #1: You are totally right! I'll get this fixed right away."
    );
}

#[test]
fn expired_subscription_drops_event_and_interrupt_suspends_until_new_input() {
    let (_root, dir, data) = dirs(&[]);
    config(
        &dir,
        &[("brief", "responses: []\n"), ("steady", "responses: []\n")],
    );
    std::fs::write(
        dir.join("brief.yaml"),
        agent(
            "brief",
            "Codertocat",
            "Hello-World",
            "    event_timeout: 1s\n",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("steady.yaml"),
        agent(
            "steady",
            "Codertocat",
            "Hello-World",
            "    include: [comment, create_pr]\n",
        ),
    )
    .unwrap();
    let server = start(&dir, &data);
    let brief = create_task(&server, "engineering/brief", "hi")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let steady = create_task(&server, "engineering/steady", "hi")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    settle(&server, &brief);
    settle(&server, &steady);
    let t = task(&server, &brief);
    assert!(t["subscriptions"][0]["expires_at"].is_string(), "{t}");

    // Interrupt `steady`: its subscriptions go until new input.
    let r = server
        .request("POST", &format!("/v1/tasks/{steady}/interrupt"))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(task(&server, &steady)["subscriptions"], json!([]));

    std::thread::sleep(Duration::from_millis(1500));
    let comment = fixture("issue_comment.created.json");
    let r = deliver(&server, "issue_comment", "d-1", &comment);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        r.json()["tasks"],
        0,
        "expired and interrupted: nobody hears it"
    );
    let t = settle(&server, &brief);
    assert_eq!(t["status"], "idle");
    assert!(webhook_messages(&server, &brief).is_empty());
    assert!(webhook_messages(&server, &steady).is_empty());
    let expired = wait_for(Duration::from_secs(5), || {
        events(&server, &brief)
            .into_iter()
            .find(|e| e["key"] == "subscriptions_expired")
    });
    assert!(expired.is_some(), "expiry is recorded in the log");
    assert_eq!(task(&server, &brief)["subscriptions"], json!([]));

    // New input restores `steady`'s subscriptions.
    let r = server
        .request("POST", &format!("/v1/tasks/{steady}/input"))
        .json(&json!({"message": "back"}))
        .send();
    assert_eq!(r.status, 202);
    settle(&server, &steady);
    assert_eq!(
        task(&server, &steady)["subscriptions"][0]["event"],
        "comment"
    );
    let r = deliver(&server, "issue_comment", "d-2", &comment);
    assert_eq!(r.json()["tasks"], 1, "{}", r.text());
    settle(&server, &steady);
    assert_eq!(webhook_messages(&server, &steady).len(), 1);
}

#[test]
fn a_filter_component_decides_routing() {
    let (_root, dir, data) = dirs(&[]);
    let filter = guest("label_filter");
    std::fs::write(
        dir.join("manifests.yaml"),
        format!(
            "kind: commonagents.info/v1beta2/tool
namespace: lab
name: tracker
description: Issues.
parameters:
  type: object
  properties:
    labels: {{type: string}}
actions:
  - name: note
    description: Note.
    execute:
      cel: {{expression: \"{{'ok': true}}\"}}
events:
  - name: issue
    message: \"issue {{event.payload.title}}\"
    receive:
      webhook:
        filter_component: {filter}
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: bugs
description: Hears about bugs.
prompt: You fix bugs.
model: scripted/script.yaml
capabilities:
  tracker:
    bindings:
      labels: \"'bug'\"
",
            filter = filter.display()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("script.yaml"), "responses: []\n").unwrap();
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let id = watching(&server, "lab/bugs", "hello");
    let send = |delivery: &str, body: Value| {
        server
            .request("POST", "/v1/webhooks/tools/lab/tracker")
            .header("X-Delivery-Id", delivery)
            .json(&body)
            .send()
    };
    let r = send(
        "d-docs",
        json!({"title": "typo", "labels": [{"name": "docs"}]}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["tasks"], 0, "the component refuses a `docs` issue");
    let r = send(
        "d-bug",
        json!({"title": "crash", "labels": [{"name": "bug"}, "p1"]}),
    );
    assert_eq!(
        r.json()["tasks"],
        1,
        "the component passes a `bug` issue: {}",
        r.text()
    );
    settle(&server, &id);
    let got = webhook_messages(&server, &id);
    assert_eq!(got, [("d-bug".to_owned(), "issue crash".to_owned())]);
}

/// A server whose agent `engineering/gated` has the github-pr `capability` lines, with
/// `files` beside it in the config dir, and a task of it waiting for events: the config's
/// root (kept while the server runs), the server and the task's id.
fn gated(capability: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, Server, String) {
    let gated = agent("gated", "Codertocat", "Hello-World", capability);
    let mut all = vec![("gated.yaml", gated.as_str())];
    all.extend_from_slice(files);
    let (root, dir, data) = dirs(&all);
    config(&dir, &[("gated", "responses: []\n")]);
    let server = start(&dir, &data);
    let id = watching(&server, "engineering/gated", "watch");
    (root, server, id)
}

#[test]
fn a_review_in_event_middleware_denies_at_once() {
    let capability = "    before:\n      - assert: \"review('user:ops')\"\n";
    let (_root, server, id) = gated(capability, &[]);
    let r = deliver(
        &server,
        "issue_comment",
        "d-1",
        &fixture("issue_comment.created.json"),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        r.json()["tasks"],
        0,
        "nobody can review while routing: denied"
    );
    routing_wrote_nothing(&server, &id);
}

#[test]
fn an_event_a_reload_took_out_of_include_reaches_no_task() {
    let (root, server, id) = gated("", &[]);
    let comment = fixture("issue_comment.created.json");
    let r = deliver(&server, "issue_comment", "d-1", &comment);
    assert_eq!(r.json()["tasks"], 1, "`comment` is included: {}", r.text());
    settle(&server, &id);
    let generation = || {
        let status = server.request("GET", "/v1/status").send().json();
        status["reload"]["generation"].as_u64().unwrap()
    };
    let loaded = generation();
    let narrowed = agent(
        "gated",
        "Codertocat",
        "Hello-World",
        "    include: [create_pr]\n",
    );
    std::fs::write(root.path().join("config/gated.yaml"), narrowed).unwrap();
    wait_for(Duration::from_secs(30), || {
        (generation() > loaded).then_some(())
    })
    .expect("the narrowed agent is in force");
    let r = deliver(&server, "issue_comment", "d-2", &comment);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        r.json()["tasks"],
        0,
        "`comment` is no longer in the capability's include: {}",
        r.text()
    );
    settle(&server, &id);
    let got = webhook_messages(&server, &id);
    assert_eq!(
        got.len(),
        1,
        "only the first comment reached the task: {got:?}"
    );
}

#[test]
fn a_lock_task_step_in_event_middleware_locks_the_task() {
    let capability = "    before:
      - assert: \"!has(event) || event.payload.comment.user.login != 'Codertocat'\"
        error_message: Not from Codertocat.
        on_fail: lock_task
";
    let (_root, server, id) = gated(capability, &[]);
    let comment = fixture("issue_comment.created.json");
    let r = deliver(&server, "issue_comment", "d-1", &comment);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["tasks"], 0, "the event is not taken: {}", r.text());
    let locked = wait_for(Duration::from_secs(30), || {
        let t = task(&server, &id);
        (t["status"] == "terminated").then_some(t)
    })
    .expect("the task was not locked");
    assert_eq!(locked["reason"], "locked", "{locked}");
    assert!(
        events(&server, &id)
            .iter()
            .any(|e| e.to_string().contains("Not from Codertocat.")),
        "the log says why"
    );
    assert!(webhook_messages(&server, &id).is_empty());
}

/// Checks that routing wrote nothing to task `id` (it is idle, and asked for no review).
fn routing_wrote_nothing(server: &Server, id: &str) {
    let t = task(server, id);
    assert_eq!(
        t["status"], "idle",
        "routing wrote nothing to the task: {t}"
    );
    assert!(
        !events(server, id)
            .iter()
            .any(|e| e["kind"] == "ReviewRequestEvent"),
        "routing asked for a review"
    );
    let reviews = server.request("GET", "/v1/reviews").send().json();
    assert_eq!(reviews["reviews"], json!([]), "{reviews}");
}

/// A `cel` tool that asks for a review, `invoke`d by event middleware: routing cannot wait for
/// a person either, so the review is a denial decided at once; the delivery is answered at
/// once, and nothing of the routing is written to the task.
#[test]
fn a_review_in_a_tool_invoked_by_event_middleware_denies_at_once() {
    let gate = "kind: commonagents.info/v1beta2/tool
namespace: engineering
name: gate
description: Asks ops.
actions:
  - name: ask
    description: Ask ops.
    parameters: {type: object}
    execute:
      cel: {expression: \"review('user:ops')\"}
";
    let capability = "    before:
      - invoke: \"gate:ask\"
      - assert: \"context.capabilities['gate_ask'].outputs[0] == true\"
  gate: \"*\"
";
    let (_root, server, id) = gated(capability, &[("gate.yaml", gate)]);
    let answer = signed_delivery(
        &server,
        "engineering/github-pr",
        "issue_comment",
        "d-1",
        &fixture("issue_comment.created.json"),
        SECRET,
    )
    .send_head(Duration::from_secs(10));
    let status = answer.map(|r| r.status);
    assert_eq!(status, Some(202), "the delivery waited for a review");
    routing_wrote_nothing(&server, &id);
    settle(&server, &id);
    let queued = webhook_messages(&server, &id);
    assert!(queued.is_empty(), "a denied event was queued: {queued:?}");
}

/// Writes an `audit` tool calling the API on `port`, and agent `engineering/audited` (for
/// Codertocat/Hello-World) whose github-pr events first `invoke` it in a `before` step.
fn audited(dir: &Path, port: u16) {
    std::fs::write(
        dir.join("audit.yaml"),
        format!(
            "kind: commonagents.info/v1beta2/tool
namespace: engineering
name: audit
description: Records what was routed.
stateless_http:
  method: POST
  url: \"http://127.0.0.1:{port}/audit\"
actions:
  - name: record
    description: Record a note.
    parameters: {{type: object}}
    execute: {{stateless_http: {{}}}}
"
        ),
    )
    .unwrap();
    let capability = "    before:
      - invoke: \"audit:record\"
  audit: \"*\"
";
    std::fs::write(
        dir.join("audited.yaml"),
        agent("audited", "Codertocat", "Hello-World", capability),
    )
    .unwrap();
}

#[test]
fn deliveries_with_different_ids_do_not_wait_for_each_other_at_the_door() {
    // `d-slow` reaches a task whose event middleware calls an API that answers only once
    // `d-other-7` (another delivery id, for another task) has been answered. A door that made
    // different ids wait for each other (these two shared one of 64 striped locks) would hold
    // `d-other-7` behind `d-slow` until the API gave up waiting.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (called, in_call) = std::sync::mpsc::channel::<()>();
    let gave_up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (port, _received) = agentmesh_testkit::serve(1, {
        let gave_up = std::sync::Arc::clone(&gave_up);
        move |_| {
            let _ = called.send(());
            if released.recv_timeout(Duration::from_secs(10)).is_err() {
                gave_up.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            ("200 OK", "{}".into())
        }
    });
    let (_root, dir, data) = dirs(&[]);
    config(
        &dir,
        &[("audited", "responses: []\n"), ("plain", "responses: []\n")],
    );
    audited(&dir, port);
    std::fs::write(
        dir.join("plain.yaml"),
        agent("plain", "someone", "Hello-World", ""),
    )
    .unwrap();
    let server = start(&dir, &data);
    let slow_task = watching(&server, "engineering/audited", "watch");
    let other_task = watching(&server, "engineering/plain", "watch");
    let comment = fixture("issue_comment.created.json");
    let slow = signed_delivery(
        &server,
        "engineering/github-pr",
        "issue_comment",
        "d-slow",
        &comment,
        SECRET,
    );
    let slow = std::thread::spawn(move || slow.send());
    // `d-slow` is in its middleware, holding whatever the door holds for it.
    in_call
        .recv_timeout(Duration::from_secs(10))
        .expect("the middleware calls the API");
    let other = deliver(
        &server,
        "issue_comment",
        "d-other-7",
        &with_login(&comment, "Codertocat", "someone"),
    );
    let _ = release.send(());
    assert_eq!(other.status, 202, "{}", other.text());
    assert_eq!(other.json()["tasks"], 1, "{}", other.text());
    let slow = slow.join().unwrap();
    assert_eq!(slow.status, 202, "{}", slow.text());
    assert!(
        !gave_up.load(std::sync::atomic::Ordering::SeqCst),
        "`d-other-7` waited for `d-slow` at the door"
    );
    for (task, delivery) in [(&slow_task, "d-slow"), (&other_task, "d-other-7")] {
        settle(&server, task);
        let messages = webhook_messages(&server, task);
        assert_eq!(messages.len(), 1, "{task}: {messages:?}");
        assert_eq!(messages[0].0, delivery);
    }
}

#[test]
fn a_redelivery_racing_its_original_waits_at_the_door_and_runs_no_middleware() {
    // Two copies of one delivery arrive at once. The event's middleware `invoke`s a tool that
    // calls a slow REST API: the copy must wait for the original and be a duplicate, not run
    // the middleware (and its call) a second time.
    let (port, received) = agentmesh_testkit::serve(2, |_| {
        std::thread::sleep(Duration::from_millis(400));
        ("200 OK", "{}".into())
    });
    let (_root, dir, data) = dirs(&[]);
    config(&dir, &[("audited", "responses: []\n")]);
    audited(&dir, port);
    let server = start(&dir, &data);
    let id = watching(&server, "engineering/audited", "watch");
    let comment = fixture("issue_comment.created.json");
    let copies: Vec<_> = (0..2)
        .map(|_| {
            let copy = signed_delivery(
                &server,
                "engineering/github-pr",
                "issue_comment",
                "d-race",
                &comment,
                SECRET,
            );
            std::thread::spawn(move || copy.send())
        })
        .collect();
    let answers: Vec<Value> = copies
        .into_iter()
        .map(|c| {
            let r = c.join().unwrap();
            assert!(r.status == 200 || r.status == 202, "{}", r.text());
            r.json()
        })
        .collect();
    let mut statuses: Vec<&str> = answers
        .iter()
        .map(|a| a["status"].as_str().unwrap())
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses, ["accepted", "duplicate"], "{answers:?}");
    // Both answers are in: every call the middleware made has been answered and counted.
    let calls: Vec<_> = received.try_iter().collect();
    assert_eq!(
        calls.len(),
        1,
        "the middleware ran once, for the original: {calls:?}"
    );
    assert_eq!(calls[0].request_line, "POST /audit HTTP/1.1");
    settle(&server, &id);
    let messages = webhook_messages(&server, &id);
    assert_eq!(messages.len(), 1, "one message queued: {messages:?}");
    assert_eq!(messages[0].0, "d-race");
}

/// A webhook's key is never the text `null` nor empty: a blank `secret:` in YAML is null,
/// which a template would write as `null`, a key anyone can sign with. Where the setting
/// wants text the config is refused; a key that renders empty (a variable set to nothing)
/// refuses every delivery.
#[test]
fn a_blank_secret_setting_is_refused_and_an_empty_one_refuses_every_delivery() {
    let blank = "kind: agentmesh/v1/host\nsettings:\n  ops:\n    pager:\n      secret:\n";
    let tool = agentmesh_testkit::fixtures::pager_tool("paged", None);
    let (_root, dir, data) = dirs(&[("pager.yaml", tool.as_str()), ("host.yaml", blank)]);
    let (code, out, err) = crate::util::agentmesh(&["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("host.yaml:5:7: error: setting `secret` of tool `ops/pager`: null is not of type \"string\""),
        "{out}{err}"
    );
    let host = agentmesh_testkit::fixtures::PAGER_HOST;
    std::fs::write(dir.join("host.yaml"), host).unwrap();
    let server = Server::start(AGENTMESH, &dir, &data, &[("PAGER_SECRET", "")]);
    let body = br#"{"text": "wake up"}"#;
    for key in ["null", ""] {
        let r = signed_delivery(&server, "ops/pager", "alert", "d-null", body, key).send();
        assert_eq!(r.status, 401, "{}", r.text());
        assert!(r.text().contains("settings.secret"), "{}", r.text());
    }
}
