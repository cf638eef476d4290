//! The `stateful_session` runtime against a stand-in session API on loopback: a session is
//! made once per task (`create`, `extract`), each call runs in it (`execute` with
//! `{session.*}`), and it is destroyed when its task ends or the host stops; a failed create
//! is tried again at the next call, a session the remote side dropped (401, 404) is made anew
//! once, and every failure of the remote side is an observation the LLM sees.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use agentmesh_testkit::Request;
use agentmesh_testkit::fixtures::{config_dir, dirs, scripted_agent};
use agentmesh_testkit::server::Server;
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::{agentmesh, events, observations, run_json};

/// A tool `t/crm` whose shared block makes (`create`, `extract`) and ends (`destroy`) a
/// session of the API at `port`, and whose action `run` posts its `q` into it (`timeout` is
/// the execute request's), and an agent `t/a` that calls it as `script` says.
fn session_config(port: u16, timeout: &str, script: &str) -> tempfile::TempDir {
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: crm
description: A session API.
stateful_session:
  create: {{method: POST, url: \"http://127.0.0.1:{port}/sessions\", body: {{user: \"{{agent.name}}\"}}}}
  extract: {{id: $.data.id}}
  destroy: {{method: DELETE, url: \"http://127.0.0.1:{port}/sessions/{{session.id}}\"}}
actions:
  - name: run
    description: Runs a query in the session.
    parameters: {{type: object, properties: {{q: {{type: string}}}}}}
    execute:
      stateful_session:
        execute:
          method: POST
          url: \"http://127.0.0.1:{port}/sessions/{{session.id}}/run\"
          body: {{q: \"{{parameters.q}}\"}}
          timeout: {timeout}
"
    );
    config_dir(&[
        ("tool.yaml", &tool),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities: {crm: \"*\"}\n"),
        ),
        ("script.yaml", script),
    ])
}

/// A script calling `crm` with each of `queries`, then answering `done`.
fn calls(queries: &[&str]) -> String {
    let mut script = String::from("responses:\n");
    for q in queries {
        script.push_str(&format!(
            "  - tool_calls: [{{name: crm, arguments: {{q: \"{q}\"}}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    script
}

/// A stand-in session API answering `requests` requests: `POST /sessions` makes session
/// `s-N` (answering `{"data": {"id"}}`), `POST /sessions/ID/run` answers what it ran in which
/// session, `DELETE /sessions/ID` answers `{}`. `fail(n, request)` may answer the n-th request
/// (from 1) otherwise.
fn session_api(
    requests: usize,
    fail: impl Fn(usize, &Request) -> Option<(&'static str, String)> + Send + 'static,
) -> (u16, Receiver<Request>) {
    let made = Arc::new(AtomicUsize::new(0));
    let seen = AtomicUsize::new(0);
    agentmesh_testkit::serve(requests, move |r| {
        let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(answer) = fail(n, r) {
            return answer;
        }
        let path = r
            .request_line
            .split(' ')
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        if r.request_line.starts_with("POST /sessions ") {
            let id = made.fetch_add(1, Ordering::SeqCst) + 1;
            return (
                "201 Created",
                json!({"data": {"id": format!("s-{id}")}}).to_string(),
            );
        }
        if let Some(session) = path
            .strip_prefix("/sessions/")
            .and_then(|p| p.strip_suffix("/run"))
        {
            let q: Value = serde_json::from_str(&r.body).unwrap_or_default();
            return (
                "200 OK",
                json!({"session": session, "ran": q["q"]}).to_string(),
            );
        }
        ("200 OK", "{}".to_owned())
    })
}

/// The next `n` requests the stand-in received, as request lines.
fn lines(received: &Receiver<Request>, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            received
                .recv_timeout(Duration::from_secs(20))
                .expect("the session API received too few requests")
                .request_line
        })
        .collect()
}

#[test]
fn a_session_is_made_once_per_task_used_by_every_call_and_destroyed_when_the_host_stops() {
    let (port, received) = session_api(4, |_, _| None);
    let dir = session_config(port, "10s", &calls(&["first", "second"]));
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");

    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    let obs = observations(&events(&data, &task));
    assert_eq!(
        obs,
        [
            json!({"session": "s-1", "ran": "first"}),
            json!({"session": "s-1", "ran": "second"})
        ]
    );
    let create = received.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(create.request_line, "POST /sessions HTTP/1.1");
    assert_eq!(
        serde_json::from_str::<Value>(&create.body).unwrap(),
        json!({"user": "a"})
    );
    assert_eq!(
        lines(&received, 3),
        [
            "POST /sessions/s-1/run HTTP/1.1",
            "POST /sessions/s-1/run HTTP/1.1",
            // `run` stops the host when the task is idle: its live session is destroyed.
            "DELETE /sessions/s-1 HTTP/1.1",
        ]
    );
}

#[test]
fn a_failed_create_is_tried_again_at_the_next_call_and_failures_are_observations() {
    // 1: the first create fails; 2: the second makes s-1; 3: its first run fails with a 500;
    // 4: a run that works, in the same session; 5: its destroy.
    let (port, received) = session_api(5, |n, _| match n {
        1 => Some((
            "503 Service Unavailable",
            json!({"error": "busy"}).to_string(),
        )),
        3 => Some((
            "500 Internal Server Error",
            json!({"error": "boom"}).to_string(),
        )),
        _ => None,
    });
    let dir = session_config(port, "10s", &calls(&["a", "b", "c"]));
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle", "remote failures never end the task");
    let obs = observations(&events(&data, &task));
    let error = |i: usize| obs[i]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error(0).contains("could not be created") && error(0).contains("HTTP 503"),
        "{obs:?}"
    );
    assert!(
        error(1).contains("HTTP 500") && error(1).contains("boom"),
        "{obs:?}"
    );
    assert_eq!(obs[2], json!({"session": "s-1", "ran": "c"}));
    assert_eq!(
        lines(&received, 5),
        [
            "POST /sessions HTTP/1.1",
            "POST /sessions HTTP/1.1",
            "POST /sessions/s-1/run HTTP/1.1",
            "POST /sessions/s-1/run HTTP/1.1",
            "DELETE /sessions/s-1 HTTP/1.1",
        ]
    );
}

#[test]
fn a_session_the_remote_side_dropped_is_made_anew_once() {
    // The second call's run in s-1 is answered 404: s-2 is made, and the run in it works.
    let (port, received) = session_api(6, |n, _| {
        (n == 3).then(|| {
            (
                "404 Not Found",
                json!({"error": "no such session"}).to_string(),
            )
        })
    });
    let dir = session_config(port, "10s", &calls(&["a", "b"]));
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    let obs = observations(&events(&data, &task));
    assert_eq!(
        obs,
        [
            json!({"session": "s-1", "ran": "a"}),
            json!({"session": "s-2", "ran": "b"})
        ]
    );
    assert_eq!(
        lines(&received, 5),
        [
            "POST /sessions HTTP/1.1",
            "POST /sessions/s-1/run HTTP/1.1",
            "POST /sessions/s-1/run HTTP/1.1",
            "POST /sessions HTTP/1.1",
            "POST /sessions/s-2/run HTTP/1.1",
        ]
    );
    assert_eq!(lines(&received, 1), ["DELETE /sessions/s-2 HTTP/1.1"]);
}

#[test]
fn a_create_answer_without_the_extracted_value_and_a_slow_execute_are_observations() {
    // 1: a create answer without `data.id`; 2: a create that works; 3: a run slower than the
    // execute request's 1s timeout; then the destroy.
    let (port, received) = session_api(4, |n, _| match n {
        1 => Some(("201 Created", json!({"session": "where?"}).to_string())),
        3 => {
            std::thread::sleep(Duration::from_secs(3));
            Some(("200 OK", "{}".to_owned()))
        }
        _ => None,
    });
    let dir = session_config(port, "1s", &calls(&["a", "b"]));
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    let obs = observations(&events(&data, &task));
    let error = |i: usize| obs[i]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error(0).contains("nothing at `$.data.id`") && error(0).contains("session.id"),
        "{obs:?}"
    );
    assert!(error(1).contains("timed out"), "{obs:?}");
    let first = lines(&received, 2);
    assert_eq!(
        first,
        ["POST /sessions HTTP/1.1", "POST /sessions HTTP/1.1"]
    );
}

#[test]
fn an_unreachable_session_api_is_an_error_of_the_call() {
    let dir = session_config(1, "5s", &calls(&[]));
    let (code, out, err) = agentmesh(&[
        "call",
        dir.path().to_str().unwrap(),
        "t/crm.run",
        "--input",
        r#"{"q": "x"}"#,
        "--data",
        dir.path().join("data").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("could not be created") && err.contains("unreachable"),
        "{out}{err}"
    );
}

#[test]
fn deleting_a_task_destroys_its_session_named_as_the_tool_page_names_it() {
    let (port, received) = session_api(3, |_, _| None);
    // The tool page's names: `initialize` for `create`, `teardown` for `destroy`.
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: crm
description: A session API.
actions:
  - name: run
    description: Runs a query in the session.
    parameters: {{type: object, properties: {{q: {{type: string}}}}}}
    execute:
      stateful_session:
        initialize: {{method: POST, url: \"http://127.0.0.1:{port}/sessions\"}}
        extract: {{id: \"$['data']['id']\"}}
        execute: {{method: POST, url: \"http://127.0.0.1:{port}/sessions/{{session.id}}/run\", body: {{q: \"{{parameters.q}}\"}}}}
        teardown: {{method: DELETE, url: \"http://127.0.0.1:{port}/sessions/{{session.id}}\"}}
"
    );
    let (_root, config, data) = dirs(&[
        ("tool.yaml", &tool),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities: {crm: \"*\"}\n"),
        ),
        ("script.yaml", &calls(&["a"])),
    ]);
    let server = Server::start(AGENTMESH, &config, &data, &[]);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    server.wait_for_status(&id, "idle");
    assert_eq!(
        lines(&received, 2),
        ["POST /sessions HTTP/1.1", "POST /sessions/s-1/run HTTP/1.1"]
    );
    // Idle, the task keeps its session; deleted, it ends, and so does the session.
    assert!(
        received.try_recv().is_err(),
        "the session ended with the turn"
    );
    let deleted = server.request("DELETE", &format!("/v1/tasks/{id}")).send();
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    assert_eq!(lines(&received, 1), ["DELETE /sessions/s-1 HTTP/1.1"]);
    server.terminate();
}

#[test]
fn a_full_pool_destroys_the_least_recently_used_idle_session_and_its_next_call_makes_one() {
    // Two tools' sessions of one task, in a pool of one session: each call of the other tool
    // takes the place of the idle session, which is destroyed, and made anew at its next call.
    let (port, received) = session_api(9, |_, _| None);
    let dir = session_config(port, "10s", "responses: []\n");
    let tool = std::fs::read_to_string(dir.path().join("tool.yaml")).unwrap();
    let script = "responses:
  - tool_calls: [{name: crm, arguments: {q: a}}]
  - tool_calls: [{name: crm2, arguments: {q: b}}]
  - tool_calls: [{name: crm, arguments: {q: c}}]
  - text: done
";
    for (name, text) in [
        ("tool2.yaml", tool.replace("name: crm", "name: crm2")),
        (
            "agent.yaml",
            scripted_agent("t/a", "capabilities: {crm: \"*\", crm2: \"*\"}\n"),
        ),
        ("script.yaml", script.to_owned()),
        (
            "host.yaml",
            "kind: agentmesh/v1/host\npolicy: {max_remote_sessions: 1}\n".to_owned(),
        ),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");

    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    assert_eq!(
        observations(&events(&data, &task)),
        [
            json!({"session": "s-1", "ran": "a"}),
            json!({"session": "s-2", "ran": "b"}),
            json!({"session": "s-3", "ran": "c"}),
        ]
    );
    // An evicted session is destroyed in the background, so its `DELETE` may come before or
    // after the next session's create; each comes after its session's run, and the last
    // (`run` stops the host when the task is idle) after everything.
    let seen = lines(&received, 9);
    let at = |line: &str| {
        seen.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("no `{line}` in {seen:?}"))
    };
    for n in 1..=3 {
        let (run, delete) = (
            at(&format!("POST /sessions/s-{n}/run HTTP/1.1")),
            at(&format!("DELETE /sessions/s-{n} HTTP/1.1")),
        );
        assert!(run < delete, "{seen:?}");
    }
    assert_eq!(
        seen.iter()
            .filter(|l| *l == "POST /sessions HTTP/1.1")
            .count(),
        3
    );
    assert_eq!(seen[8], "DELETE /sessions/s-3 HTTP/1.1", "{seen:?}");
}

#[test]
fn validate_refuses_session_blocks_the_host_cannot_run() {
    let dir = config_dir(&[(
        "tool.yaml",
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: bad
description: Sessions written wrong.
stateless_http: {url: \"http://x/{session.id}\"}
actions:
  - name: both
    description: Both names of create.
    execute:
      stateful_session:
        create: {url: \"http://x/new\"}
        initialize: {url: \"http://x/new\"}
        extract: {id: \"$.items[*]\"}
        execute: {url: \"http://x/{session.sid}\"}
  - name: nocreate
    description: No create anywhere.
    execute:
      stateful_session:
        execute: {url: \"http://x/run\"}
  - name: early
    description: The session in its own create.
    execute:
      stateful_session:
        create: {url: \"http://x/new/{session.id}\"}
        execute: {url: \"http://x/run\"}
",
    )]);
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    for expected in [
        "tool.yaml:5:",
        "`session` is not available in a `stateless_http` request",
        "tool.yaml:12:9: error: `initialize` is the tool page's name for `create`",
        "tool.yaml:13:",
        "`$.items[*]` is not a JSONPath this host reads",
        "tool.yaml:14:",
        "`session.sid` is not extracted: the session's `extract` gives id",
        "action `nocreate`: `stateful_session` needs a `create` request",
        "tool.yaml:24:",
        "`session` is not available in a session's `create` request",
    ] {
        assert!(out.contains(expected), "no `{expected}` in:\n{out}{err}");
    }
}
