//! The task API of `agentmesh serve`: auth roles, live event streams, reviews, graceful drain.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use agentmesh_testkit::client::Response;
use agentmesh_testkit::fixtures::{self, API_TOKEN_ENV, API_TOKENS, echo_tool, reviewed_agent};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::AGENTMESH;
use crate::util::{agentmesh, rest_of_stream};

/// The config dir (and a data dir beside it): `lab/careful` calls `lab/echo` once, which
/// waits for `user:ops` to approve, then answers; `host` ends the manifests.
fn dirs(host: &str) -> (TempDir, PathBuf, PathBuf) {
    let careful = reviewed_agent("lab/careful", "script.yaml");
    let manifests = format!("{}---\n{careful}---\n{host}", echo_tool("lab"));
    fixtures::dirs(&[
        ("manifests.yaml", &manifests),
        (
            "script.yaml",
            "responses:\n  - tool_calls: [{name: echo, arguments: {text: hi}}]\n  - text: Echoed.\n",
        ),
    ])
}

#[test]
fn tokens_and_roles_decide_who_sees_and_changes_what() {
    let (_root, dir, data) = dirs(API_TOKENS);
    let server = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
    let bearer = |t: &str| format!("Bearer {t}");
    let body = json!({"agent": "lab/careful"});

    let r = server.request("POST", "/v1/tasks").json(&body).send();
    assert_eq!(r.status, 401, "no token: {}", r.text());
    assert_eq!(r.json()["error"]["code"], "unauthorized");
    let r = server
        .request("POST", "/v1/tasks")
        .header("Authorization", "Bearer nope")
        .json(&body)
        .send();
    assert_eq!(r.status, 401);
    let r = server
        .request("POST", "/v1/tasks")
        .header("Authorization", &bearer("audit-token"))
        .json(&body)
        .send();
    assert_eq!(r.status, 403, "read_only cannot create: {}", r.text());

    let r = server
        .request("POST", "/v1/tasks")
        .header("Authorization", &bearer("alice-token"))
        .json(&body)
        .send();
    assert_eq!(r.status, 201, "{}", r.text());
    let task = r.json();
    assert_eq!(
        task["owner"], "user:alice",
        "an agent_user's task is its own"
    );
    let id = task["id"].as_str().unwrap();
    let r = server
        .request("POST", "/v1/tasks")
        .header("Authorization", &bearer("alice-token"))
        .json(&json!({"agent": "lab/careful", "user": {"id": "user:bob"}}))
        .send();
    assert_eq!(r.status, 403, "alice cannot act as bob");
    // Nor give herself an email the host cannot vouch for (guards may read it).
    let r = server
        .request("POST", "/v1/tasks")
        .header("Authorization", &bearer("alice-token"))
        .json(&json!({"agent": "lab/careful",
                      "user": {"id": "user:alice", "email": "ceo@corp.example"}}))
        .send();
    assert_eq!(r.status, 403, "alice chose her own email: {}", r.text());
    assert!(r.text().contains("email"), "{}", r.text());

    let get = |token: &str| {
        server
            .request("GET", &format!("/v1/tasks/{id}"))
            .header("Authorization", &bearer(token))
            .send()
            .status
    };
    assert_eq!(get("alice-token"), 200);
    assert_eq!(get("bob-token"), 404, "bob cannot see alice's task");
    assert_eq!(get("admin-token"), 200);
    assert_eq!(get("audit-token"), 200);
    let list = |token: &str| {
        server
            .request("GET", "/v1/tasks")
            .header("Authorization", &bearer(token))
            .send()
            .json()["tasks"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(list("alice-token"), 1);
    assert_eq!(list("bob-token"), 0);
    assert_eq!(list("admin-token"), 1);
    let r = server
        .request("DELETE", &format!("/v1/tasks/{id}"))
        .header("Authorization", &bearer("bob-token"))
        .send();
    assert_eq!(r.status, 404);
    let r = server
        .request("DELETE", &format!("/v1/tasks/{id}"))
        .header("Authorization", &bearer("alice-token"))
        .send();
    assert_eq!(r.status, 204);
    let t: Value = server
        .request("GET", &format!("/v1/tasks/{id}"))
        .header("Authorization", &bearer("admin-token"))
        .send()
        .json();
    assert_eq!(t["status"], "terminated");
    assert_eq!(t["reason"], "deleted");
    // Deleting it again answers 204 and adds nothing to its log.
    let log_length = || {
        server
            .request("GET", &format!("/v1/tasks/{id}/events"))
            .header("Authorization", &bearer("admin-token"))
            .send()
            .json()["events"]
            .as_array()
            .unwrap()
            .len()
    };
    let before = log_length();
    let r = server
        .request("DELETE", &format!("/v1/tasks/{id}"))
        .header("Authorization", &bearer("alice-token"))
        .send();
    assert_eq!(r.status, 204);
    assert_eq!(log_length(), before);
}

#[test]
fn a_non_loopback_address_needs_api_tokens() {
    let (_root, dir, data) = dirs("");
    let (code, _, err) = agentmesh(&[
        "serve",
        dir.to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("without `api_tokens`"), "{err}");
}

/// An API token whose variable is empty could never be presented (an empty bearer token is
/// refused): `validate` says so at the token's `env`, as it does of one that is not set.
#[test]
fn an_api_token_whose_variable_is_empty_is_refused_at_its_place() {
    let (_root, dir, _data) = dirs(API_TOKENS);
    let vars: Vec<(&str, &str)> = API_TOKEN_ENV
        .iter()
        .map(|&(var, value)| (var, if var == "T_OPS" { "" } else { value }))
        .filter(|&(var, _)| var != "T_BOB")
        .collect();
    let env = crate::util::Env {
        cwd: None,
        vars: &vars,
    };
    let (code, out, err) = crate::util::agentmesh_in(&env, &["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    let manifests = std::fs::read_to_string(dir.join("manifests.yaml")).unwrap();
    let place = |var: &str| {
        let (line, text) = manifests
            .lines()
            .enumerate()
            .find(|(_, l)| l.contains(&format!("env: {var}")))
            .unwrap();
        format!(
            "manifests.yaml:{}:{}",
            line + 1,
            text.find(var).unwrap() + 1
        )
    };
    let said = format!("{out}{err}");
    for expected in [
        format!(
            "{}: error: api token `user:ops`: environment variable `T_OPS` is empty",
            place("T_OPS")
        ),
        format!(
            "{}: error: api token `user:bob`: environment variable `T_BOB` is not set",
            place("T_BOB")
        ),
    ] {
        assert!(said.contains(&expected), "no {expected:?} in:\n{said}");
    }
    assert_eq!(said.lines().count(), 2, "only those errors:\n{said}");
}

#[test]
fn a_review_over_http_resumes_the_task_and_events_stream_live() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);

    // A live stream from the start.
    let r = server
        .request("POST", "/v1/tasks")
        .json(&json!({"agent": "lab/careful"}))
        .send();
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let (head, mut sse) = server.open_sse(&id);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("text/event-stream"),
        "{head}"
    );

    let r = server
        .request("POST", &format!("/v1/tasks/{id}/input"))
        .json(&json!({"message": "echo hi"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(r.json()["queued_at"].is_i64());
    server.wait_for_status(&id, "waiting");

    // The stream delivers the review request as it happens.
    let review_id = read_until_kind(&mut sse, "ReviewRequestEvent")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();
    approve_review(&server, &id, &review_id);
    let observation = read_until_kind(&mut sse, "ObservationEvent");
    assert_eq!(observation["result"], json!({"said": "hi"}));
    let answer = read_until_kind(&mut sse, "MessageEvent");
    assert_eq!(answer["content"][0]["text"], "Echoed.");
}

#[test]
fn a_review_pending_across_a_restart_is_decided_after_it() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let id = server.create_task(&json!({"agent": "lab/careful", "input": {"message": "echo hi"}}));
    let review_id = server.wait_for_event(&id, "ReviewRequestEvent")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The host stops while the task waits (SIGTERM: a crash could come before the review
    // request's flush, which follows the write that shows it; the turn would then run again
    // and ask anew).
    assert_eq!(server.terminate(), Some(0));

    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let t = server
        .request("GET", &format!("/v1/tasks/{id}"))
        .send()
        .json();
    assert_eq!(t["status"], "waiting", "{t}");
    approve_review(&server, &id, &review_id);
    let r = decide(&server, &id, &review_id);
    assert_eq!(r.status, 404, "deciding twice: {}", r.text());
    let done = server.wait_for_status(&id, "idle");
    assert_eq!(done["output"][0]["message"][0]["text"], "Echoed.", "{done}");
    let events = server
        .request("GET", &format!("/v1/tasks/{id}/events"))
        .send()
        .json();
    let events = events["events"].as_array().unwrap();
    let observations: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "ObservationEvent")
        .map(|e| &e["result"])
        .collect();
    assert_eq!(observations, [&json!({"said": "hi"})]);
    assert!(
        !events.iter().any(|e| e["kind"] == "AgentErrorEvent"),
        "nothing was reported as interrupted: {events:?}"
    );
}

/// Reads SSE events until one of `kind`; returns its data.
fn read_until_kind(sse: &mut BufReader<TcpStream>, kind: &str) -> Value {
    loop {
        let mut line = String::new();
        assert!(sse.read_line(&mut line).unwrap() > 0, "the stream ended");
        if let Some(data) = line.trim().strip_prefix("data:") {
            let event: Value = serde_json::from_str(data.trim()).unwrap();
            if event["kind"] == kind && (kind != "MessageEvent" || event["source"] == "agent") {
                return event;
            }
        }
    }
}

#[test]
fn a_body_over_max_body_bytes_is_413() {
    let (_root, dir, data) = dirs("kind: agentmesh/v1/host\npolicy: {max_body_bytes: 1KiB}\n");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let big = json!({"message": "x".repeat(4096)});
    let r = server
        .request("POST", "/v1/webhooks/tools/lab/echo")
        .json(&big)
        .send();
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "too_large");
    let r = server
        .request("POST", "/v1/tasks")
        .json(&json!({"agent": "lab/careful", "input": big}))
        .send();
    assert_eq!(r.status, 413, "{}", r.text());
}

#[test]
fn every_error_has_the_json_shape() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    for (method, path, status, code) in [
        ("GET", "/v1/tasks?limt=5", 400, "bad_request"),
        ("GET", "/v1/tasks/t_x/events?after=soon", 400, "bad_request"),
        ("GET", "/v1/schedules?taks=t_x", 400, "bad_request"),
        ("DELETE", "/v1/schedules/%FF%FE", 400, "bad_request"),
        ("PUT", "/v1/tasks", 405, "method_not_allowed"),
        ("GET", "/v1/nowhere", 404, "not_found"),
    ] {
        let r = server.request(method, path).send();
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        let body = r.json();
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{method} {path}: {body}"
        );
    }
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    assert_eq!(server.request("GET", "/healthz").send().status, 200);
    assert_eq!(server.terminate(), Some(0));
}

/// Approves review `review_id` of task `id` as the anonymous admin (no `api_tokens`).
fn decide(server: &Server, id: &str, review_id: &str) -> Response {
    server
        .request("POST", &format!("/v1/tasks/{id}/reviews/{review_id}"))
        .json(&json!({"approve": true}))
        .send()
}

/// Approves review `review_id` of task `id`, after checking that an unknown review id of the
/// task is not found.
fn approve_review(server: &Server, id: &str, review_id: &str) {
    assert_eq!(decide(server, id, "nope").status, 404);
    let r = decide(server, id, review_id);
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn the_task_list_pages_newest_first_with_a_cursor() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let created: Vec<String> = (0..5)
        .map(|_| server.create_task(&json!({"agent": "lab/careful"})))
        .collect();
    let page = |query: &str| {
        let r = server.request("GET", &format!("/v1/tasks?{query}")).send();
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        let body = r.json();
        let ids: Vec<String> = body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect();
        (ids, body["next_cursor"].as_str().map(str::to_owned))
    };
    let mut seen = Vec::new();
    let mut query = "limit=2".to_owned();
    loop {
        let (ids, next) = page(&query);
        assert!(ids.len() <= 2, "{ids:?}");
        seen.extend(ids);
        match next {
            Some(cursor) => query = format!("limit=2&cursor={cursor}"),
            None => break,
        }
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first, "every task once, newest first");
    assert_eq!(page("owner=anonymous").0.len(), 5);
    assert!(page("owner=user:nobody").0.is_empty());
    for bad in ["limit=0", "limit=1001", "cursor=nope"] {
        let r = server.request("GET", &format!("/v1/tasks?{bad}")).send();
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "bad_request", "{bad}");
    }
}

#[test]
fn the_lists_hold_every_task_and_review_from_the_first_call_after_a_restart() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let waiting =
        server.create_task(&json!({"agent": "lab/careful", "input": {"message": "echo hi"}}));
    server.wait_for_event(&waiting, "ReviewRequestEvent");
    let mut created: Vec<String> = (0..3)
        .map(|_| server.create_task(&json!({"agent": "lab/careful"})))
        .collect();
    created.insert(0, waiting.clone());
    assert_eq!(server.terminate(), Some(0));

    // The lists are served from an index built at start: the first calls wait for it.
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let reviews = server.request("GET", "/v1/reviews").send().json();
    let reviews = reviews["reviews"].as_array().unwrap();
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    assert_eq!(reviews[0]["task_id"], waiting.as_str());
    let tasks = server.request("GET", "/v1/tasks").send().json();
    let ids: Vec<&str> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = created.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first);
    assert_eq!(tasks["tasks"][3]["status"], "waiting", "{tasks}");
}

/// The events of task `id`, as the API lists them.
fn task_events(server: &Server, id: &str) -> Vec<Value> {
    let events = server
        .request("GET", &format!("/v1/tasks/{id}/events"))
        .send()
        .json();
    events["events"].as_array().cloned().unwrap_or_default()
}

/// Deleting or interrupting a task whose call waits in a review ends the wait at once: the
/// call is denied and never runs, whatever is decided later.
#[test]
fn interrupting_or_deleting_a_task_waiting_in_a_review_ends_the_wait() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let in_review = || {
        let id =
            server.create_task(&json!({"agent": "lab/careful", "input": {"message": "echo hi"}}));
        let review = server.wait_for_event(&id, "ReviewRequestEvent")["review_id"]
            .as_str()
            .unwrap()
            .to_owned();
        (id, review)
    };

    let (id, review) = in_review();
    let answer = server
        .request("POST", &format!("/v1/tasks/{id}/interrupt"))
        .send_head(Duration::from_secs(10));
    assert_eq!(
        answer.map(|r| r.status),
        Some(202),
        "the interrupt waited for the review"
    );
    let r = decide(&server, &id, &review);
    assert_eq!(
        r.status,
        404,
        "the ended review was still open: {}",
        r.text()
    );
    let events = task_events(&server, &id);
    assert!(
        !events.iter().any(|e| e["kind"] == "ObservationEvent"),
        "the call ran: {events:?}"
    );
    assert!(
        events.iter().any(|e| e["kind"] == "ReviewDecisionEvent"),
        "no decision ended the review: {events:?}"
    );

    let (id, review) = in_review();
    let answer = server
        .request("DELETE", &format!("/v1/tasks/{id}"))
        .send_head(Duration::from_secs(10));
    assert_eq!(
        answer.map(|r| r.status),
        Some(204),
        "the deletion waited for the review"
    );
    assert_eq!(decide(&server, &id, &review).status, 404);
    let events = task_events(&server, &id);
    assert!(
        !events.iter().any(|e| e["kind"] == "ObservationEvent"),
        "the call ran: {events:?}"
    );
    let t = server
        .request("GET", &format!("/v1/tasks/{id}"))
        .send()
        .json();
    assert_eq!(t["reason"], "deleted", "{t}");
}

/// An interrupt its caller gave up on while it waited for the turn (the connection closed)
/// is withdrawn: the turn goes on, and later input runs.
#[test]
fn an_interrupt_given_up_on_is_withdrawn() {
    let (port, _received) = agentmesh_testkit::serve(4, |_| {
        std::thread::sleep(Duration::from_secs(3));
        ("200 OK", "{\"slow\": true}".into())
    });
    let manifests = format!(
        "{}{}",
        fixtures::slow_tool("lab", port),
        fixtures::scripted_agent("lab/patient", "capabilities: {slow: \"*\"}\n")
    );
    let (_root, dir, data) = fixtures::dirs(&[
        ("manifests.yaml", &manifests),
        (
            "script.yaml",
            "responses:
  - tool_calls: [{name: slow, arguments: {}}]
  - text: first done
  - text: second done
",
        ),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let id = server.create_task(&json!({"agent": "lab/patient", "input": {"message": "go"}}));
    server.wait_for_event(&id, "ActionEvent");
    let gave_up = server
        .request("POST", &format!("/v1/tasks/{id}/interrupt"))
        .send_head(Duration::from_millis(300));
    assert!(
        gave_up.is_none(),
        "the interrupt answered before the call ended"
    );
    server.send_input(&id, "again");
    let texts = wait_for(Duration::from_secs(30), || {
        let t = server
            .request("GET", &format!("/v1/tasks/{id}"))
            .send()
            .json();
        let texts: Vec<Value> = t["output"]
            .as_array()?
            .iter()
            .map(|o| o["message"][0]["text"].clone())
            .collect();
        (texts.len() == 2).then_some(texts)
    });
    assert_eq!(
        texts,
        Some(vec![json!("first done"), json!("second done")]),
        "the task stopped for an interrupt nobody waited for: {:?}",
        task_events(&server, &id)
    );
}

/// A live stream is authorized for every batch of events it sends, not once when it opens: a
/// reviewer whose review was decided, and a caller whose token a reload removed, read nothing
/// the task did afterwards; their streams end.
#[test]
fn a_stream_ends_when_its_caller_may_no_longer_read_the_task() {
    let (_root, dir, data) = dirs(API_TOKENS);
    let server = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
    let id = server.create_task_as(
        "alice-token",
        &json!({"agent": "lab/careful", "input": {"message": "echo hi"}}),
    );
    // `user:ops` reads alice's task only while its review waits.
    let waiting = wait_for(Duration::from_secs(30), || {
        let t = server
            .request("GET", &format!("/v1/tasks/{id}"))
            .header("Authorization", "Bearer admin-token")
            .send()
            .json();
        (t["status"] == "waiting").then_some(())
    });
    assert!(waiting.is_some(), "the task never waited in its review");
    let (head, mut reviewer) = server.open_sse_as(&id, "ops-token");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let review_id = read_until_kind(&mut reviewer, "ReviewRequestEvent")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (head, mut owner) = server.open_sse_as(&id, "alice-token");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    read_until_kind(&mut owner, "ReviewRequestEvent");

    // A reload removes alice's token.
    let without_alice = API_TOKENS.replace(
        "  - {subject: \"user:alice\", role: agent_user, env: T_ALICE}\n",
        "",
    );
    assert_ne!(without_alice, API_TOKENS);
    let careful = reviewed_agent("lab/careful", "script.yaml");
    std::fs::write(
        dir.join("manifests.yaml"),
        format!("{}---\n{careful}---\n{without_alice}", echo_tool("lab")),
    )
    .unwrap();
    let removed = wait_for(Duration::from_secs(30), || {
        let r = server
            .request("GET", &format!("/v1/tasks/{id}"))
            .header("Authorization", "Bearer alice-token")
            .send();
        (r.status == 401).then_some(())
    });
    assert!(removed.is_some(), "the reload never removed alice's token");

    let r = server
        .request("POST", &format!("/v1/tasks/{id}/reviews/{review_id}"))
        .header("Authorization", "Bearer ops-token")
        .json(&json!({"approve": true}))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    let answered = wait_for(Duration::from_secs(30), || {
        let t = server
            .request("GET", &format!("/v1/tasks/{id}"))
            .header("Authorization", "Bearer admin-token")
            .send()
            .json();
        (t["status"] == "idle").then_some(())
    });
    assert!(answered.is_some(), "the approved task never answered");

    for (who, sse) in [("the reviewer", &mut reviewer), ("alice", &mut owner)] {
        let after = ["ObservationEvent", "MessageEvent"];
        let (rest, ended) = rest_of_stream(sse, &after);
        for kind in after {
            assert!(
                !rest.contains(kind),
                "{who} read the task's {kind} after losing access: {rest}"
            );
        }
        assert!(ended, "{who}'s stream did not end: {rest}");
    }
}

/// Sends `request` (a whole HTTP/1.1 request, `Connection: close`) to `server`; the status
/// and the answer's text.
fn raw(server: &Server, request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    (status, text)
}

/// A host without tokens (every caller an admin) answers only its own machine: not a web
/// page that reached it by DNS rebinding (the `Host` is the page's name), nor a cross-site
/// form or `fetch` that needs no answer to do harm (the `Origin` is the page's). Its own
/// tools and pages, and webhooks, still get through.
#[test]
fn a_token_less_host_answers_no_other_site() {
    let (_root, dir, data) = dirs("");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let port = server.addr.port();
    let task = r#"{"agent": "lab/careful"}"#;
    let post = |path: &str, host: &str, extra: &str, body: &str| {
        raw(
            &server,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let rebound = format!("rebound.example:{port}");

    // Rebinding: the page's name in `Host`.
    let (status, text) = raw(
        &server,
        &format!("GET /v1/tasks HTTP/1.1\r\nHost: {rebound}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("loopback"), "{text}");
    let (status, text) = post(
        "/ui/login",
        &rebound,
        &format!("Origin: http://{rebound}\r\nContent-Type: application/x-www-form-urlencoded\r\n"),
        "token=",
    );
    assert_eq!(status, 403, "{text}");
    assert!(!text.to_ascii_lowercase().contains("set-cookie"), "{text}");
    let (status, text) = post(
        "/mcp?agent=lab/careful",
        &rebound,
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    );
    assert_eq!(status, 403, "{text}");

    // Cross-site: a form posting JSON as text/plain needs no preflight.
    let local = format!("127.0.0.1:{port}");
    let (status, text) = post(
        "/v1/tasks",
        &local,
        "Origin: https://evil.example\r\nContent-Type: text/plain\r\n",
        task,
    );
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("origin"), "{text}");
    let listed = server.request("GET", "/v1/tasks").send().json();
    assert_eq!(listed["tasks"], json!([]), "a cross-site post made a task");

    // This machine's own tools (no `Origin`) and pages (a loopback `Origin`).
    let ct = "Content-Type: application/json\r\n";
    assert_eq!(post("/v1/tasks", &local, ct, task).0, 201);
    let own_page = format!("Origin: http://localhost:{port}\r\n{ct}");
    assert_eq!(
        post("/v1/tasks", &format!("localhost:{port}"), &own_page, task).0,
        201
    );
    // Webhooks take no token and check their senders themselves.
    let (status, text) = post("/v1/webhooks/tools/lab/echo", &rebound, ct, "{}");
    assert_ne!(status, 403, "{text}");
}
