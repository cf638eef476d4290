//! Tool events received by polling (`receive.poll`) against a stand-in feed on loopback that
//! pages its items by a `since` cursor: one poller per distinct bound value, not per task; a
//! new item reaches the tasks of its value once, across a restart; the items already there
//! when polling began are no events; a failing feed is backed off and polled again; a webhook
//! delivery cannot claim a polled item's delivery id first.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentmesh_engine::PollKey;
use agentmesh_testkit::Request;
use agentmesh_testkit::fixtures::{API_TOKEN_ENV, API_TOKENS, dirs};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::{agentmesh, triggered_messages};

/// The feed's items by repository, each `{"id", "seq", "title"}`.
type Items = Arc<Mutex<HashMap<String, Vec<Value>>>>;

/// Answers given before the feed answers from its items (a failing feed).
type Canned = Arc<Mutex<VecDeque<(&'static str, String)>>>;

/// How many items a page of the feed holds.
const PAGE: usize = 2;

/// The stand-in feed: `GET /repos/REPO/items?since=N` answers `{"items"}`, the repository's
/// items with `seq` above N, at most [`PAGE`] of them, oldest first; an answer in `canned`
/// comes first. Serves for two minutes.
fn feed(items: &Items, canned: &Canned) -> (u16, Receiver<Request>) {
    let (items, canned) = (Arc::clone(items), Arc::clone(canned));
    agentmesh_testkit::serve_for(10_000, Duration::from_secs(120), move |r| {
        if let Some(answer) = canned.lock().unwrap().pop_front() {
            return answer;
        }
        let path = r.request_line.split(' ').nth(1).unwrap_or_default();
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let repo = path
            .strip_prefix("/repos/")
            .and_then(|p| p.strip_suffix("/items"))
            .unwrap_or_default();
        let since: i64 = query
            .strip_prefix("since=")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let all = items.lock().unwrap();
        let page: Vec<&Value> = all
            .get(repo)
            .into_iter()
            .flatten()
            .filter(|i| i["seq"].as_i64().unwrap_or(0) > since)
            .take(PAGE)
            .collect();
        ("200 OK", json!({ "items": page }).to_string())
    })
}

/// Adds item `title` to `repo`'s feed.
fn add(items: &Items, repo: &str, title: &str) {
    let mut all = items.lock().unwrap();
    let list = all.entry(repo.to_owned()).or_default();
    let seq = list.len() as i64 + 1;
    list.push(json!({"id": format!("{repo}-{seq}"), "seq": seq, "title": title}));
}

/// The tool `t/feed` polling the feed at `port` every `interval` for its `repo` parameter's
/// items (the cursor is the last `seq` seen), and agents `t/alpha` and `t/beta` bound to the
/// repositories `alpha` and `beta`.
fn config(
    port: u16,
    interval: &str,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    config_with_events(port, interval, "")
}

/// [`config`], with `events` (YAML list items) after the tool's polled event.
fn config_with_events(
    port: u16,
    interval: &str,
    events: &str,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: feed
description: A repository's feed.
parameters:
  type: object
  properties:
    repo: {{type: string}}
actions:
  - name: count
    description: Counts.
    execute: {{cel: {{expression: \"1\"}}}}
events:
  - name: item
    message: \"new {{event.payload.title}} in {{event.payload.id}}\"
    receive:
      poll:
        url: \"http://127.0.0.1:{port}/repos/{{parameters.repo}}/items?since={{poll.cursor == null ? 0 : poll.cursor}}\"
        detect: response.items
        cursor: \"size(response.items) > 0 ? response.items[size(response.items) - 1].seq : poll.cursor\"
        interval: {interval}
{events}"
    );
    let agent = |name: &str| {
        format!(
            "kind: commonagents.info/v1beta2/agent
namespace: t
name: {name}
description: Watches {name}.
prompt: Watch.
model: scripted/script.yaml
capabilities:
  feed:
    bindings:
      repo: \"'{name}'\"
"
        )
    };
    let agents = format!("{}---\n{}", agent("alpha"), agent("beta"));
    let script = "responses:\n".to_owned() + &"  - text: Seen.\n".repeat(40);
    dirs(&[
        ("feed.yaml", &tool),
        ("agents.yaml", &agents),
        ("script.yaml", &script),
    ])
}

/// The messages of task `id` that a polled item brought.
fn polled_messages(server: &Server, id: &str) -> Vec<String> {
    triggered_messages(server, id, "webhook")
}

/// Waits until task `id` has exactly the polled messages `want` (in any order), then returns
/// them sorted.
fn wait_for_messages(server: &Server, id: &str, want: &[&str]) -> Vec<String> {
    let mut want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    let got = wait_for(Duration::from_secs(30), || {
        let mut got = polled_messages(server, id);
        got.sort();
        (got == want).then_some(got)
    });
    got.unwrap_or_else(|| {
        panic!(
            "task {id} has polled messages {:?}, not {want:?}",
            polled_messages(server, id)
        )
    })
}

/// Waits for the feed's next `n` requests (30 s each at most).
fn polls(received: &Receiver<Request>, n: usize) {
    for _ in 0..n {
        received
            .recv_timeout(Duration::from_secs(30))
            .expect("the host polls the feed");
    }
}

/// The repositories of the next requests the feed receives within `within`.
fn repos_polled(received: &Receiver<Request>, within: Duration) -> Vec<String> {
    let until = std::time::Instant::now() + within;
    let mut out = Vec::new();
    while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
        match received.recv_timeout(left) {
            Ok(r) => out.push(
                r.request_line
                    .split('/')
                    .nth(2)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            Err(_) => break,
        }
    }
    out.sort();
    out
}

#[test]
fn a_poll_driven_agent_takes_each_new_item_exactly_once_across_a_restart() {
    let items: Items = Arc::default();
    let canned: Canned = Arc::default();
    add(&items, "alpha", "old");
    let (port, received) = feed(&items, &canned);
    let (_root, dir, data) = config(port, "1s");
    let (code, out, err) = agentmesh(&["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");

    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let task = server.create_task(&json!({"agent": "t/alpha"}));
    // Two polls: the first recorded what was there, the second went on from it.
    polls(&received, 2);
    // Three new items: two pages, each item once.
    for title in ["b", "c", "d"] {
        add(&items, "alpha", title);
    }
    wait_for_messages(
        &server,
        &task,
        &["new b in alpha-2", "new c in alpha-3", "new d in alpha-4"],
    );
    // Each arrived as a tool event with a delivery id of its own.
    let message = server.wait_for_event(&task, "MessageEvent");
    let trigger = &message["metadata"]["trigger"];
    assert_eq!(trigger["source"], "webhook", "{message}");
    assert!(
        trigger["delivery_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("poll-")),
        "{message}"
    );
    assert_eq!(server.terminate(), Some(0));

    // While the host is down an item comes; after the restart it arrives once, and nothing
    // delivered before arrives again.
    add(&items, "alpha", "e");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    wait_for_messages(
        &server,
        &task,
        &[
            "new b in alpha-2",
            "new c in alpha-3",
            "new d in alpha-4",
            "new e in alpha-5",
        ],
    );
    // A few more polls change nothing.
    while received.try_recv().is_ok() {}
    polls(&received, 3);
    assert_eq!(polled_messages(&server, &task).len(), 4);
}

#[test]
fn one_poller_per_bound_value_feeds_the_tasks_of_that_value_only() {
    let items: Items = Arc::default();
    let canned: Canned = Arc::default();
    let (port, received) = feed(&items, &canned);
    // An hour between polls: each poller polls once when it starts (and at each start of
    // the host), so the requests count the pollers.
    let (_root, dir, data) = config(port, "1h");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let alpha_1 = server.create_task(&json!({"agent": "t/alpha"}));
    let alpha_2 = server.create_task(&json!({"agent": "t/alpha"}));
    let beta = server.create_task(&json!({"agent": "t/beta"}));
    assert_eq!(
        repos_polled(&received, Duration::from_secs(5)),
        ["alpha", "beta"],
        "one poll per bound repository, not per task"
    );
    add(&items, "alpha", "a1");
    add(&items, "beta", "b1");
    assert_eq!(server.terminate(), Some(0));

    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    wait_for_messages(&server, &alpha_1, &["new a1 in alpha-1"]);
    wait_for_messages(&server, &alpha_2, &["new a1 in alpha-1"]);
    wait_for_messages(&server, &beta, &["new b1 in beta-1"]);
    assert_eq!(
        repos_polled(&received, Duration::from_secs(3)),
        ["alpha", "beta"]
    );

    // A task that ends is no reason to poll: with only beta's left, a restart polls beta.
    let r = server
        .request("DELETE", &format!("/v1/tasks/{alpha_1}"))
        .send();
    assert_eq!(r.status, 204, "{}", r.text());
    let r = server
        .request("DELETE", &format!("/v1/tasks/{alpha_2}"))
        .send();
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(server.terminate(), Some(0));
    let _server = Server::start(AGENTMESH, &dir, &data, &[]);
    assert_eq!(repos_polled(&received, Duration::from_secs(3)), ["beta"]);
}

#[test]
fn a_failing_feed_is_polled_again_and_loses_nothing() {
    let items: Items = Arc::default();
    let canned: Canned = Arc::default();
    let (port, received) = feed(&items, &canned);
    let (_root, dir, data) = config(port, "1s");
    // The first answers: a server error, a body that is no JSON, a list where `detect` wants
    // a map; then the feed answers.
    canned.lock().unwrap().extend([
        (
            "500 Internal Server Error",
            "{\"error\": \"down\"}".to_owned(),
        ),
        ("200 OK", "not json".to_owned()),
        ("200 OK", "[1, 2]".to_owned()),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let task = server.create_task(&json!({"agent": "t/alpha"}));
    // Three failures, then the first good poll, which records what is there.
    received
        .recv_timeout(Duration::from_secs(60))
        .expect("the host polls the feed");
    // `/v1/status` shows the poller failing, and why.
    let failing = wait_for(Duration::from_secs(30), || {
        poll_source(&server).filter(|s| s["failures"].as_u64() >= Some(1))
    })
    .expect("/v1/status never showed the failed poll");
    assert!(
        failing["last_error"].as_str().unwrap().contains("500"),
        "{failing}"
    );
    assert!(failing["last_error_at"].is_string(), "{failing}");
    for _ in 0..3 {
        received
            .recv_timeout(Duration::from_secs(60))
            .expect("the host polls the feed again after a failure");
    }
    add(&items, "alpha", "late");
    wait_for_messages(&server, &task, &["new late in alpha-1"]);
    // Working again: no failures since, the last error still shown.
    let working = poll_source(&server).expect("the poller is in /v1/status");
    assert_eq!(working["failures"], 0, "{working}");
    assert!(working["last_ok_at"].is_string(), "{working}");
    assert!(working["last_error"].is_string(), "{working}");
    let record = server
        .request("GET", &format!("/v1/tasks/{task}"))
        .send()
        .json();
    assert_ne!(record["status"], "terminated", "{record}");
}

#[test]
fn a_webhook_cannot_spend_a_polled_items_delivery_id_ahead_of_it() {
    // The tool takes unsigned webhook deliveries too. Their sender can compute the delivery id
    // the feed's next item will bring (it is made of the poller's key and the item's id).
    let items: Items = Arc::default();
    let canned: Canned = Arc::default();
    let (port, received) = feed(&items, &canned);
    let note = "  - name: note
    message: \"note {event.payload.text}\"
    receive:
      webhook: {}
";
    let (_root, dir, data) = config_with_events(port, "1s", note);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let task = server.create_task(&json!({"agent": "t/alpha"}));
    // Two polls: the first recorded what was there.
    polls(&received, 2);
    let key = PollKey {
        tool: "t/feed".into(),
        event: "item".into(),
        values: vec![("repo".into(), "alpha".into())],
    };
    let r = server
        .request("POST", "/v1/webhooks/tools/t/feed")
        .header("X-Delivery-Id", &key.delivery_id("alpha-1"))
        .json(&json!({"text": "early"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["tasks"], 1, "{}", r.text());
    add(&items, "alpha", "a");
    wait_for_messages(&server, &task, &["new a in alpha-1", "note early"]);
}

#[test]
fn an_agent_user_is_not_shown_pollers_in_the_status() {
    // A poller is known by the values its tasks' bindings sealed, whoever owns them.
    let items: Items = Arc::default();
    let canned: Canned = Arc::default();
    let (port, received) = feed(&items, &canned);
    let (_root, dir, data) = config(port, "1h");
    std::fs::write(dir.join("host.yaml"), API_TOKENS).unwrap();
    let server = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
    let call = |token: &str, method: &str, path: &str| {
        server
            .request(method, path)
            .header("Authorization", &format!("Bearer {token}"))
    };
    let r = call("alice-token", "POST", "/v1/tasks")
        .json(&json!({"agent": "t/alpha"}))
        .send();
    assert_eq!(r.status, 201, "{}", r.text());
    polls(&received, 1);
    let sources = |token: &str| {
        let r = call(token, "GET", "/v1/status").send();
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["event_sources"].clone()
    };
    for token in ["admin-token", "audit-token"] {
        let seen = sources(token);
        assert_eq!(seen[0]["kind"], "poll", "{token}: {seen}");
        assert!(seen[0]["id"].as_str().unwrap().contains("alpha"), "{seen}");
    }
    for token in ["bob-token", "alice-token"] {
        assert_eq!(sources(token), json!([]), "{token}");
    }
}

/// The poller `/v1/status` lists, if it lists one.
fn poll_source(server: &Server) -> Option<Value> {
    let status = server.request("GET", "/v1/status").send().json();
    let sources = status["event_sources"].as_array()?;
    assert!(sources.len() <= 1, "{status}");
    let source = sources.first()?.clone();
    assert_eq!(source["kind"], "poll", "{source}");
    Some(source)
}
