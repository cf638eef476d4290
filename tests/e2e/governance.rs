//! Governance that fails closed, through the real binary: guardrail transforms replace,
//! `before_first` gates stay shut, conditions that cannot be evaluated run their step,
//! `review()` wherever `validate` accepts it, failing endpoints are observations, prompts see
//! the first input, `invoke` steps as the spec says, arguments checked against their schema.

use std::path::Path;
use std::time::Duration;

use agentmesh_testkit::client::Response;
use agentmesh_testkit::fixtures::{
    API_TOKEN_ENV, API_TOKENS, config_dir, dirs, echo_tool, scripted_agent,
};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::{Env, agentmesh, agentmesh_in, completion, events, run_in, run_json, run_task};
use crate::wasm::guest;

/// The results of the calls in `events`, in order: an observation's result, or
/// `{"rejected": reason}` for a refused call.
fn results(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match e["kind"].as_str() {
            Some("ObservationEvent") => Some(e["result"].clone()),
            Some("UserRejectObservation") => Some(json!({"rejected": e["reason"]})),
            _ => None,
        })
        .collect()
}

/// `agentmesh run DIR --agent t/a -m MESSAGE --data DATA --json EXTRA…`.
fn run(dir: &Path, data: &Path, message: &str, extra: &[&str]) -> (Option<i32>, Value, String) {
    run_task(dir, "t/a", message, data, extra)
}

/// Runs `t/a`, with `body` (capabilities, guardrails, …) and the tool `echo`, on `script` and
/// `-m go` (exit 0 expected), in a config with the `extra` files too: the results of its calls.
fn echo_results(body: &str, script: &str, extra: &[(&str, &str)]) -> Vec<Value> {
    let echo = echo_tool("t");
    let agent = scripted_agent("t/a", body);
    let files = [
        ("echo.yaml", echo.as_str()),
        ("agent.yaml", &agent),
        ("script.yaml", script),
    ];
    let (_root, dir, data) = dirs(&[&files, extra].concat());
    let task = run_json(&dir, "t/a", "go", &data, &[]);
    results(&events(&data, &task))
}

/// The script calling `echo` once with `text: a`, then answering `done`.
const CALL_A: &str =
    "responses:\n  - tool_calls: [{name: echo, arguments: {text: a}}]\n  - text: done\n";

#[test]
fn guardrail_transforms_replace_the_input_and_the_answer_everywhere() {
    let (port, llm) = agentmesh_testkit::serve(1, |_| {
        ("200 OK", completion("The password is hunter2, as asked."))
    });
    let host = format!(
        "kind: agentmesh/v1/host
models:
  openai: {{base_url: \"http://127.0.0.1:{port}/v1\", api_key: test-key}}
"
    );
    let agent = r#"kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Redacts both ways.
prompt: Help.
model: openai/fake
guardrails:
  before:
    - transform: "input.message[0].text.replace('4111-1111-1111-1111', '[card]')"
  after:
    - transform: "{'message': output.message[0].text.replace('hunter2', '[withheld]')}"
exposes:
  said: "output.message[0].text"
  heard: "context.input[0].message[0].text"
"#;
    let (_root, dir, data) = dirs(&[("host.yaml", &host), ("agent.yaml", agent)]);
    let (code, task, err) = run(&dir, &data, "Charge 4111-1111-1111-1111 please.", &[]);
    assert_eq!(code, Some(0), "{err}");

    // What the LLM was sent holds the transformed input only.
    let request = llm.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        request.body.contains("Charge [card] please."),
        "{}",
        request.body
    );
    assert!(!request.body.contains("4111"), "{}", request.body);

    // The task's output and what derives from it hold the transformed answer.
    assert_eq!(
        task["output"][0]["message"][0]["text"],
        "The password is [withheld], as asked."
    );
    assert_eq!(
        task["exposes"]["said"],
        "The password is [withheld], as asked."
    );
    assert_eq!(task["exposes"]["heard"], "Charge [card] please.");

    // The log holds neither original.
    let log = events(&data, &task);
    let text = serde_json::to_string(&log).unwrap();
    assert!(
        !text.contains("4111") && !text.contains("hunter2"),
        "{text}"
    );
    let messages: Vec<&Value> = log.iter().filter(|e| e["kind"] == "MessageEvent").collect();
    assert_eq!(messages[0]["content"][0]["text"], "Charge [card] please.");
    assert_eq!(
        messages[1]["content"][0]["text"],
        "The password is [withheld], as asked."
    );
}

#[test]
fn a_guardrail_transform_of_the_wrong_shape_fails_its_step() {
    // A number is neither the message text nor an input: the step fails (lock_task), it is not
    // silently ignored.
    let body = "guardrails:\n  before:\n    - transform: \"size(input.message)\"\n";
    let (_root, dir, data) = dirs(&[
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", "responses:\n  - text: never\n"),
    ]);
    let (code, task, err) = run(&dir, &data, "hello", &[]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(task["reason"], "locked");
    assert!(err.contains("must yield the message text"), "{err}");
}

const CALL_A_A_B_A: &str = "responses:
  - tool_calls: [{name: echo, arguments: {text: a}}]
  - tool_calls: [{name: echo, arguments: {text: a}}]
  - tool_calls: [{name: echo, arguments: {text: b}}]
  - tool_calls: [{name: echo, arguments: {text: a}}]
  - text: done
";

#[test]
fn a_before_first_gate_stays_shut_until_a_call_passes_it() {
    let body = "capabilities:
  echo:
    before_first:
      - assert: \"input.text != 'a'\"
        error_message: not a
";
    let results = echo_results(body, CALL_A_A_B_A, &[]);
    assert_eq!(
        results,
        [
            json!({"rejected": "not a"}),
            json!({"rejected": "not a"}),
            json!({"said": "b"}),
            json!({"said": "a"}),
        ]
    );
}

#[test]
fn a_denied_review_in_before_first_is_not_bypassed_by_calling_again() {
    // Nobody can answer a review during `run`: every attempt is a denial, the second too.
    let body = "capabilities:
  echo:
    before_first:
      - assert: \"review('user:ops')\"
        error_message: not approved
";
    let script = "responses:
  - tool_calls: [{name: echo, arguments: {text: a}}]
  - tool_calls: [{name: echo, arguments: {text: b}}]
  - text: done
";
    let results = echo_results(body, script, &[]);
    assert_eq!(
        results,
        [
            json!({"rejected": "not approved"}),
            json!({"rejected": "not approved"}),
        ]
    );
}

#[test]
fn a_condition_that_cannot_be_evaluated_runs_its_step() {
    // `input.missing` is not there: the condition errors, and the guard runs anyway.
    let body = "capabilities:
  echo:
    before:
      - condition: \"input.missing == 'x'\"
        assert: \"false\"
        error_message: guarded
";
    let results = echo_results(body, CALL_A, &[]);
    assert_eq!(results, [json!({"rejected": "guarded"})]);

    // The same in a guardrail: the task is locked before the LLM is asked.
    let body = "guardrails:
  before:
    - condition: \"input.nope > 3\"
      assert: \"false\"
      error_message: guarded input
";
    let (_root, dir, data) = dirs(&[
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", "responses:\n  - text: never\n"),
    ]);
    let (code, task, err) = run(&dir, &data, "hello", &[]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(task["reason"], "locked");
    assert!(err.contains("guarded input"), "{err}");
}

#[test]
fn a_trigger_condition_that_cannot_be_evaluated_runs_its_step() {
    let files = [
        (
            "host.yaml",
            "kind: agentmesh/v1/host
sources:
  ops: {signature: bearer, tokens: [{subject: \"svc:deployer\", env: OPS_TOKEN}]}
",
        ),
        ("agent.yaml", &scripted_agent("t/a", "") as &str),
        ("script.yaml", "responses:\n  - text: ok\n"),
        (
            "trigger.yaml",
            "kind: commonagents.info/v1beta2/trigger
namespace: t
name: deploy
agent: a
owner: \"svc:deployer\"
source:
  type: ops
  before:
    - condition: \"event.payload.missing == 'prod'\"
      assert: \"false\"
message: \"Deploy {event.payload.service}\"
",
        ),
    ];
    let (_root, dir, data) = dirs(&files);
    let server = Server::start(AGENTMESH, &dir, &data, &[("OPS_TOKEN", "ops-token")]);
    let r = server
        .request("POST", "/v1/triggers/t/deploy/fire")
        .header("authorization", "Bearer ops-token")
        .json(&json!({"service": "api"}))
        .send();
    assert_eq!(r.status, 409, "the guard ran and refused: {}", r.text());
}

#[test]
fn a_failing_endpoint_is_an_observation_and_the_task_goes_on() {
    // Nothing listens on port 9 of loopback here: the request cannot connect.
    let tool = r#"kind: commonagents.info/v1beta2/tool
namespace: t
name: remote
description: A remote API.
actions:
  - name: get
    description: Get it.
    execute:
      stateless_http: {method: GET, url: "http://127.0.0.1:9/thing", timeout: 5s}
"#;
    let script = "responses:\n  - tool_calls: [{name: remote, arguments: {}}]\n  - text: It is down; try later.\n";
    let (_root, dir, data) = dirs(&[
        ("remote.yaml", tool),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities:\n  remote: \"*\"\n"),
        ),
        ("script.yaml", script),
    ]);
    let task = run_json(&dir, "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    assert_eq!(
        task["output"][0]["message"][0]["text"],
        "It is down; try later."
    );
    let results = results(&events(&data, &task));
    let error = results[0]["error"].as_str().unwrap();
    assert!(error.contains("unreachable"), "{error}");
}

#[test]
fn the_prompt_sees_the_first_input_and_one_that_cannot_render_ends_the_task() {
    let agent_with = |prompt: &str| {
        format!(
            "kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Test agent.
prompt: \"{prompt}\"
model: scripted/script.yaml
parameters:
  type: object
  properties:
    ticket_id: {{type: string}}
"
        )
    };
    let files = |prompt: &str| {
        [
            ("agent.yaml", agent_with(prompt)),
            ("script.yaml", "responses:\n  - text: ok\n".to_owned()),
        ]
    };
    let good = files("Work on ticket {context.input[0].ticket_id}.");
    let (_root, dir, data) = dirs(&good.each_ref().map(|(n, t)| (*n, t.as_str())));
    let task = run_json(&dir, "t/a", "go", &data, &["--param", "ticket_id=T-7"]);
    let log = events(&data, &task);
    let prompt = log
        .iter()
        .find(|e| e["kind"] == "SystemPromptEvent")
        .unwrap();
    assert_eq!(prompt["prompt"], "Work on ticket T-7.");

    // A hole that cannot render is a task error naming the hole; the LLM is never asked.
    let bad = files("Work on {context.input[0].nope}.");
    let (_root, dir, data) = dirs(&bad.each_ref().map(|(n, t)| (*n, t.as_str())));
    let (code, task, err) = run(&dir, &data, "go", &["--param", "ticket_id=T-7"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(task["reason"], "error");
    assert!(err.contains("{context.input[0].nope}"), "{err}");
    let log = events(&data, &task);
    assert!(
        log.iter().all(|e| e["kind"] != "SystemPromptEvent"),
        "{log:?}"
    );
}

#[test]
fn under_serve_the_runtime_api_root_is_the_servers_base_url() {
    let body = "prompt: \"Report to {runtime.api_root}/v1.\"\n";
    let agent = scripted_agent("t/a", "").replace("prompt: Help.\n", body);
    let (_root, dir, data) = dirs(&[
        ("agent.yaml", &agent),
        ("script.yaml", "responses:\n  - text: ok\n"),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    let prompt = server.wait_for_event(&id, "SystemPromptEvent");
    assert_eq!(
        prompt["prompt"],
        format!("Report to http://{}/v1.", server.addr)
    );
}

/// A tool whose `cel` expression asks `user:ops`, and an agent that calls it.
const REVIEWED_TOOL: &str = r#"kind: commonagents.info/v1beta2/tool
namespace: t
name: payout
description: Pays out after a review.
actions:
  - name: pay
    description: Pay.
    parameters:
      type: object
      properties:
        amount: {type: integer}
    execute:
      cel: {expression: "review('user:ops') ? {'paid': input.amount} : {'paid': 0}"}
"#;

/// Waits until task `id` waits in a review, approves or denies it as the anonymous admin.
fn decide(server: &Server, id: &str, approve: bool) {
    let review = server.wait_for_event(id, "ReviewRequestEvent");
    let review_id = review["review_id"].as_str().unwrap();
    let r = server
        .request("POST", &format!("/v1/tasks/{id}/reviews/{review_id}"))
        .json(&json!({"approve": approve}))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The results of task `id`'s calls once it is idle.
fn results_when_idle(server: &Server, id: &str) -> Vec<Value> {
    server.wait_for_status(id, "idle");
    let log = server
        .request("GET", &format!("/v1/tasks/{id}/events"))
        .send()
        .json();
    results(log["events"].as_array().unwrap())
}

#[test]
fn review_works_in_a_cel_tool_expression() {
    let script =
        "responses:\n  - tool_calls: [{name: payout, arguments: {amount: 5}}]\n  - text: done\n";
    let (_root, dir, data) = dirs(&[
        ("payout.yaml", REVIEWED_TOOL),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities:\n  payout: \"*\"\n"),
        ),
        ("script.yaml", script),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let approved = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    decide(&server, &approved, true);
    assert_eq!(results_when_idle(&server, &approved), [json!({"paid": 5})]);
    let denied = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    decide(&server, &denied, false);
    assert_eq!(results_when_idle(&server, &denied), [json!({"paid": 0})]);
}

/// A `serve` of `t/a`, whose `echo` calls `user:ops` reviews, with [`API_TOKENS`].
fn reviewed_server() -> (tempfile::TempDir, Server) {
    let capability =
        "capabilities:\n  echo:\n    before:\n      - assert: \"review('user:ops')\"\n";
    let (root, dir, data) = dirs(&[
        ("echo.yaml", &echo_tool("t")),
        ("agent.yaml", &scripted_agent("t/a", capability)),
        ("script.yaml", CALL_A),
        ("host.yaml", API_TOKENS),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
    (root, server)
}

/// Sends `method path` with `token`'s bearer and `body` (if any).
fn as_user(
    server: &Server,
    token: &str,
    (method, path): (&str, &str),
    body: Option<Value>,
) -> Response {
    let r = server
        .request(method, path)
        .header("Authorization", &format!("Bearer {token}"));
    match body {
        Some(b) => r.json(&b).send(),
        None => r.send(),
    }
}

/// Creates a task of `t/a` as alice and waits until it waits in its review: (task id, review).
fn alices_task_in_review(server: &Server) -> (String, Value) {
    let body = json!({"agent": "t/a", "input": {"message": "go"}});
    let r = as_user(server, "alice-token", ("POST", "/v1/tasks"), Some(body));
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let review = wait_for(Duration::from_secs(30), || {
        let r = as_user(server, "admin-token", ("GET", "/v1/reviews"), None);
        let reviews = r.json()["reviews"].as_array()?.clone();
        reviews.into_iter().find(|r| r["task_id"] == id.as_str())
    })
    .unwrap_or_else(|| panic!("task {id}'s review is never listed"));
    (id, review)
}

/// The `ReviewDecisionEvent`s of task `id` (read as the admin): `(approve, decided_by)`.
fn decisions(server: &Server, id: &str) -> Vec<(Value, Value)> {
    let path = format!("/v1/tasks/{id}/events");
    let log = as_user(server, "admin-token", ("GET", &path), None).json();
    log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ReviewDecisionEvent")
        .map(|e| (e["approve"].clone(), e["decided_by"].clone()))
        .collect()
}

#[test]
fn only_the_named_reviewer_or_an_admin_decides_a_review() {
    let (_root, server) = reviewed_server();
    let (id, review) = alices_task_in_review(&server);
    assert_eq!(review["agent"], "t/a", "{review}");
    assert_eq!(review["reviewer"], "user:ops", "{review}");
    assert_eq!(review["input"], json!({"text": "a"}), "{review}");
    assert_eq!(review["step"]["action"], "say", "{review}");
    assert_eq!(review["step"]["phase"], "before", "{review}");
    assert!(review["requested_at"].is_string(), "{review}");
    let review_id = review["review_id"].as_str().unwrap();
    let listed = |token: &str| {
        let r = as_user(&server, token, ("GET", "/v1/reviews"), None);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["reviews"].as_array().unwrap().len()
    };
    assert_eq!(listed("ops-token"), 1, "the named reviewer sees it");
    assert_eq!(listed("alice-token"), 0, "the owner is not the reviewer");
    assert_eq!(listed("audit-token"), 0);

    // The reviewer reads the task's events without owning the task; others do not.
    let events = format!("/v1/tasks/{id}/events");
    let r = as_user(&server, "ops-token", ("GET", &events), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("ReviewRequestEvent"));
    assert_eq!(
        as_user(&server, "bob-token", ("GET", &events), None).status,
        404
    );

    let path = format!("/v1/tasks/{id}/reviews/{review_id}");
    let approve = Some(json!({"approve": true}));
    for token in ["alice-token", "audit-token"] {
        let r = as_user(&server, token, ("POST", &path), approve.clone());
        assert_eq!(r.status, 403, "{token}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "forbidden", "{token}");
    }
    // Bob may not see Alice's task: it answers him as a task that does not exist would,
    // naming neither its review nor its reviewer.
    let r = as_user(&server, "bob-token", ("POST", &path), approve.clone());
    assert_eq!(r.status, 404, "{}", r.text());
    let unknown = as_user(
        &server,
        "bob-token",
        ("POST", &format!("/v1/tasks/t_nope/reviews/{review_id}")),
        approve.clone(),
    );
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    assert_eq!(
        r.text().replace(id.as_str(), "ID"),
        unknown.text().replace("t_nope", "ID")
    );
    // A name in the body is never taken for the caller.
    let posing = Some(json!({"approve": true, "user": "user:admin"}));
    let r = as_user(&server, "ops-token", ("POST", &path), posing);
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(
        decisions(&server, &id).is_empty(),
        "nothing was decided yet"
    );

    let r = as_user(&server, "ops-token", ("POST", &path), approve);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(results_as_admin(&server, &id), [json!({"said": "a"})]);
    assert_eq!(decisions(&server, &id), [(json!(true), json!("user:ops"))]);

    // An admin decides any review, recorded as itself.
    let (id, review) = alices_task_in_review(&server);
    let path = format!(
        "/v1/tasks/{id}/reviews/{}",
        review["review_id"].as_str().unwrap()
    );
    let deny = Some(json!({"approve": false}));
    let r = as_user(&server, "admin-token", ("POST", &path), deny);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        decisions(&server, &id),
        [(json!(false), json!("user:admin"))]
    );
    assert_eq!(listed("ops-token"), 0, "no review is pending any more");
}

#[test]
fn a_decision_is_in_the_log_when_it_is_acknowledged() {
    // The decision used to be handed to the waiting turn, which wrote it after the 200: a
    // client reading the log right after its decision often found nothing (and a crash in
    // between lost it).
    let (_root, server) = reviewed_server();
    for _ in 0..30 {
        let (id, review) = alices_task_in_review(&server);
        let path = format!(
            "/v1/tasks/{id}/reviews/{}",
            review["review_id"].as_str().unwrap()
        );
        let approve = Some(json!({"approve": true}));
        let r = as_user(&server, "ops-token", ("POST", &path), approve);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(decisions(&server, &id), [(json!(true), json!("user:ops"))]);
    }
}

/// The results of task `id`'s calls once it is idle, read as the admin.
fn results_as_admin(server: &Server, id: &str) -> Vec<Value> {
    let path = format!("/v1/tasks/{id}");
    wait_for(Duration::from_secs(30), || {
        let task = as_user(server, "admin-token", ("GET", &path), None).json();
        (task["status"] == "idle").then_some(())
    })
    .unwrap_or_else(|| panic!("task {id} did not become idle"));
    let log = as_user(
        server,
        "admin-token",
        ("GET", &format!("{path}/events")),
        None,
    )
    .json();
    results(log["events"].as_array().unwrap())
}

/// `audit.record(note, level = info, owner)`: answers its input.
const AUDIT: &str = r#"kind: commonagents.info/v1beta2/tool
namespace: t
name: audit
description: Records notes.
actions:
  - name: record
    description: Record a note.
    parameters:
      type: object
      properties:
        note: {type: string}
        level: {type: string, default: info}
        owner: {type: string}
        approved: {type: boolean, default: false}
    execute:
      cel: {expression: "input"}
"#;

#[test]
fn review_works_in_an_invoke_steps_bindings() {
    let body = "capabilities:
  echo:
    before:
      - invoke: \"audit:record\"
        bindings:
          note: \"input.text\"
          owner: \"'acme'\"
          approved: \"review('user:ops')\"
      - assert: \"context.capabilities.audit.outputs[0].approved\"
        error_message: not approved
";
    let (_root, dir, data) = dirs(&[
        ("echo.yaml", &echo_tool("t")),
        ("audit.yaml", AUDIT),
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", CALL_A),
    ]);
    let (code, out, err) = agentmesh(&["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let approved = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    decide(&server, &approved, true);
    assert_eq!(
        results_when_idle(&server, &approved),
        [json!({"said": "a"})]
    );
    // A denial fails the invoke step itself: `audit:record` does not run.
    let denied = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    decide(&server, &denied, false);
    let why = "invoke `audit`: binding `approved` failed: the review of `user:ops` was denied";
    assert_eq!(
        results_when_idle(&server, &denied),
        [json!({"rejected": why})]
    );
}

/// The `ReviewRequestEvent`s of task `id` once it has `n` of them.
fn review_requests(server: &Server, id: &str, n: usize) -> Vec<Value> {
    wait_for(Duration::from_secs(30), || {
        let log = server
            .request("GET", &format!("/v1/tasks/{id}/events"))
            .send()
            .json();
        let requests: Vec<Value> = log["events"]
            .as_array()?
            .iter()
            .filter(|e| e["kind"] == "ReviewRequestEvent")
            .cloned()
            .collect();
        (requests.len() >= n).then_some(requests)
    })
    .unwrap_or_else(|| panic!("task {id} never asked for {n} reviews"))
}

#[test]
fn a_step_asks_only_the_reviews_its_value_needs_and_fails_on_a_denial() {
    let body = "capabilities:
  echo:
    before:
      - assert: \"input.text == 'a' || review('user:ops')\"
      - transform: \"input.text == 'a' ? input : (review('user:sec') ? input : input)\"
";
    let script = "responses:
  - tool_calls: [{name: echo, arguments: {text: a}}]
  - tool_calls: [{name: echo, arguments: {text: b}}]
  - text: done
";
    let (_root, dir, data) = dirs(&[
        ("echo.yaml", &echo_tool("t")),
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", script),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    // The call with `text: a` passes both steps without a review; the one with `b` asks ops,
    // then sec, whose denial fails the transform although its value would not change.
    let decisions = [("user:ops", true), ("user:sec", false)];
    for (n, (reviewer, approve)) in decisions.into_iter().enumerate() {
        let requests = review_requests(&server, &id, n + 1);
        let request = &requests[n];
        assert_eq!(request["reviewer"], reviewer, "{requests:?}");
        assert_eq!(request["subject"]["input"]["text"], "b", "{requests:?}");
        let path = format!(
            "/v1/tasks/{id}/reviews/{}",
            request["review_id"].as_str().unwrap()
        );
        let r = server
            .request("POST", &path)
            .json(&json!({"approve": approve}))
            .send();
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let why = "transform `input.text == 'a' ? input : (review('user:sec') ? input : input)` \
        failed: the review of `user:sec` was denied";
    assert_eq!(
        results_when_idle(&server, &id),
        [json!({"said": "a"}), json!({"rejected": why})]
    );
    assert_eq!(
        review_requests(&server, &id, 2).len(),
        2,
        "no other review was asked"
    );
}

#[test]
fn review_is_refused_at_validate_where_it_cannot_work() {
    let body = "capabilities:
  echo:
    before:
      - condition: \"review('user:ops')\"
        assert: \"true\"
";
    let (_root, dir, _data) = dirs(&[
        ("echo.yaml", &echo_tool("t")),
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", "responses:\n  - text: ok\n"),
    ]);
    let (code, out, _) = agentmesh(&["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        out.lines().count(),
        1,
        "the only problem is the review: {out}"
    );
    assert!(
        out.contains("`review()` is not available in a step's `condition`"),
        "{out}"
    );
}

#[test]
fn invoke_steps_fill_defaults_apply_bindings_and_record_under_the_function_name() {
    // The agent has `audit` as a capability with a binding; the step's own binding wins over
    // it, defaults fill the rest, and the result is `context.capabilities.audit`.
    let body = "capabilities:
  audit:
    bindings:
      owner: \"'from-capability'\"
      note: \"'from-capability'\"
  echo:
    before:
      - invoke: \"audit:record\"
        bindings:
          note: \"'from-step: ' + input.text\"
      - assert: \"context.capabilities.audit.count_successful == 1\"
        error_message: the invoke is not recorded
exposes:
  invoked: \"context.capabilities.audit.outputs[0]\"
";
    let (_root, dir, data) = dirs(&[
        ("echo.yaml", &echo_tool("t")),
        ("audit.yaml", AUDIT),
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", CALL_A),
    ]);
    let task = run_json(&dir, "t/a", "go", &data, &[]);
    assert_eq!(results(&events(&data, &task)), [json!({"said": "a"})]);
    assert_eq!(
        task["exposes"]["invoked"],
        json!({"owner": "from-capability", "note": "from-step: a", "level": "info", "approved": false})
    );
}

#[test]
fn a_failed_invoke_follows_on_fail() {
    // `level` must be a string: the invoke fails its schema check, and the step's `on_fail`
    // (block) refuses the call.
    let body = "capabilities:
  echo:
    before:
      - invoke: \"audit:record\"
        bindings:
          note: \"input.text\"
          owner: \"'acme'\"
          level: \"3\"
";
    let results = echo_results(body, CALL_A, &[("audit.yaml", AUDIT)]);
    let reason = results[0]["rejected"].as_str().unwrap();
    assert!(
        reason.contains("`level`") && reason.contains("string"),
        "{reason}"
    );
}

/// `stats.count(count: integer, mode: a|b)`.
const STATS: &str = r#"kind: commonagents.info/v1beta2/tool
namespace: t
name: stats
description: Counts.
actions:
  - name: count
    description: Count.
    parameters:
      type: object
      properties:
        count: {type: integer}
        mode: {type: string, enum: [a, b]}
        filter:
          type: object
          properties:
            min: {type: integer}
          required: [min]
          default: {min: 0}
    execute:
      cel: {expression: "{'counted': input.count}"}
"#;

#[test]
fn arguments_are_checked_against_their_schema() {
    let script = "responses:
  - tool_calls: [{name: stats, arguments: {count: three, mode: a}}]
  - tool_calls: [{name: stats, arguments: {count: 3, mode: c}}]
  - tool_calls: [{name: stats, arguments: {count: 3, mode: a, filter: {max: 1}}}]
  - tool_calls: [{name: stats, arguments: {count: 3, mode: b}}]
  - text: done
";
    let (_root, dir, data) = dirs(&[
        ("stats.yaml", STATS),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities:\n  stats: \"*\"\n"),
        ),
        ("script.yaml", script),
    ]);
    let task = run_json(&dir, "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    let results = results(&events(&data, &task));
    let error = |i: usize| results[i]["error"].as_str().unwrap().to_owned();
    assert!(
        error(0).contains("argument `count`") && error(0).contains("integer"),
        "{}",
        error(0)
    );
    assert!(
        error(1).contains("argument `mode`") && error(1).contains("\"a\""),
        "{}",
        error(1)
    );
    assert!(
        error(2).contains("argument `filter`") && error(2).contains("min"),
        "{}",
        error(2)
    );
    assert_eq!(results[3], json!({"counted": 3}));
}

#[test]
fn task_input_is_checked_against_the_agents_parameters() {
    let body = "parameters:
  type: object
  properties:
    priority: {type: integer, default: 1}
";
    let (_root, dir, data) = dirs(&[
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", "responses:\n  - text: ok\n"),
    ]);
    let (code, _, err) = run(&dir, &data, "go", &["--param", "priority=high"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("parameter `priority`") && err.contains("integer"),
        "{err}"
    );

    // Over HTTP the same is a 422 naming the field, and nothing is queued.
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let r = server
        .request("POST", "/v1/tasks")
        .json(&json!({"agent": "t/a", "input": {"message": "go", "priority": "high"}}))
        .send();
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("priority"), "{}", r.text());
}

#[test]
fn a_wasm_step_honours_its_timeout_and_memory_limit() {
    let component = guest("test_greedy_middleware");
    let body = format!(
        "capabilities:
  echo:
    before:
      - match: say
        wasm: {{component: {c}, config: {{mode: loop}}, timeout: 200ms}}
        error_message: \"too slow\"
        on_fail: continue
      - wasm: {{component: {c}, config: {{mode: loop}}, timeout: 300ms}}
      - wasm: {{component: {c}, config: {{mode: hog}}, memory_limit: 4MiB}}
",
        c = component.display()
    );
    let results = echo_results(&body, CALL_A, &[]);
    let first = &results[0];
    let reason = first["rejected"].as_str().unwrap();
    assert!(reason.contains("its 300ms timeout"), "{reason}");

    // Without the looping step, the hog meets its memory limit.
    let body = body.replace(
        &format!(
            "      - wasm: {{component: {}, config: {{mode: loop}}, timeout: 300ms}}\n",
            component.display()
        ),
        "",
    );
    let results = echo_results(&body, CALL_A, &[]);
    let first = &results[0];
    let reason = first["rejected"].as_str().unwrap();
    assert!(reason.contains("memory limit of 4096 KiB"), "{reason}");
}

/// A host config whose every kind of scalar is read from the environment.
const HOST_FROM_ENV: &str = "kind: agentmesh/v1/host
default_model: {env: AM_MODEL}
listen: {env: AM_LISTEN}
policy:
  max_wakeups_per_task: {env: AM_WAKEUPS}
  trigger_ttl: {env: AM_TTL}
  max_body_bytes: {env: AM_BODY}
condensation: {keep_recent: {env: AM_KEEP}}
api_tokens:
  - {subject: {env: AM_SUBJECT}, role: {env: AM_ROLE}, env: AM_TOKEN}
models:
  local: {base_url: {env: AM_BASE}, max_retries: {env: AM_RETRIES}, timeout: {env: AM_TIMEOUT}}
mount: {backend: {env: AM_BACKEND}, root: {env: AM_ROOT}}
";

#[test]
fn every_host_config_scalar_may_be_read_from_env() {
    let agent = "kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Runs on the host's default model.
prompt: Help.
";
    let (_root, dir, data) = dirs(&[
        ("host.yaml", HOST_FROM_ENV),
        ("agent.yaml", agent),
        ("script.yaml", "responses:\n  - text: done\n"),
    ]);
    let all = [
        ("AM_MODEL", "scripted/script.yaml"),
        ("AM_LISTEN", "127.0.0.1:0"),
        ("AM_WAKEUPS", "7"),
        ("AM_TTL", "2h"),
        ("AM_BODY", "64KiB"),
        ("AM_KEEP", "4"),
        ("AM_SUBJECT", "user:ops"),
        ("AM_ROLE", "admin"),
        ("AM_TOKEN", "a-token-value"),
        ("AM_BASE", "http://127.0.0.1:9/v1"),
        ("AM_RETRIES", "1"),
        ("AM_TIMEOUT", "5s"),
        ("AM_BACKEND", "file"),
        ("AM_ROOT", "mounts"),
    ];
    let dir_arg = dir.to_str().unwrap();
    let env = Env {
        cwd: None,
        vars: &all,
    };
    let (code, out, err) = agentmesh_in(&env, &["validate", dir_arg]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = run_in(&env, &dir, "t/a", "go", &data, &[]);
    assert_eq!((code, out.trim()), (Some(0), "done"), "{err}");

    // A variable that is not set is an error at its place, naming it.
    let some: Vec<(&str, &str)> = all
        .iter()
        .copied()
        .filter(|(k, _)| *k != "AM_TTL")
        .collect();
    let env = Env {
        cwd: None,
        vars: &some,
    };
    let (code, out, err) = agentmesh_in(&env, &["validate", dir_arg]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(
        format!("{out}{err}").lines().count(),
        1,
        "only that error: {out}{err}"
    );
    assert!(
        format!("{out}{err}")
            .contains("host.yaml:6:17: error: environment variable `AM_TTL` is not set"),
        "{out}{err}"
    );
}

/// A binding scopes a tool to its value: a value the LLM gives another parameter of the URL
/// cannot climb out of it (`../`), add to the query or cut the URL short.
#[test]
fn a_url_value_cannot_walk_around_a_bound_parameter() {
    let (port, received) = agentmesh_testkit::serve(4, |r| {
        ("200 OK", json!({"got": r.request_line}).to_string())
    });
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: files
description: Files of a repository.
parameters:
  type: object
  properties:
    owner: {{type: string, require_binding: true}}
    repo: {{type: string, require_binding: true}}
    path: {{type: string}}
stateless_http:
  method: GET
  url: \"http://127.0.0.1:{port}/repos/{{parameters.owner}}/{{parameters.repo}}/contents/{{parameters.path}}?ref=main\"
actions:
  - name: read
    description: Read a file.
    execute: {{stateless_http: {{}}}}
"
    );
    let agent = "kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Reads files of one repository.
prompt: Read.
model: scripted/script.yaml
capabilities:
  files:
    bindings: {owner: \"'bound-org'\", repo: \"'bound-repo'\"}
";
    let script = "responses:
  - tool_calls:
      - {name: files, arguments: {path: src/lib.rs}}
      - {name: files, arguments: {path: ../../../victim-org/private/contents/secrets.env}}
      - {name: files, arguments: {path: \"..\\\\..\\\\..\\\\victim-org\"}}
      - {name: files, arguments: {path: \"x?ref=evil#\"}}
  - text: done
";
    let dir = config_dir(&[
        ("tool.yaml", &tool),
        ("agent.yaml", agent),
        ("script.yaml", script),
    ]);
    let data = dir.path().join("data");
    run_json(dir.path(), "t/a", "go", &data, &[]);
    let lines: Vec<String> = std::iter::from_fn(|| {
        received
            .recv_timeout(Duration::from_millis(500))
            .ok()
            .map(|r| r.request_line)
    })
    .collect();
    assert_eq!(
        lines.first().map(String::as_str),
        Some("GET /repos/bound-org/bound-repo/contents/src/lib.rs?ref=main HTTP/1.1"),
        "the plain call should reach the bound repository: {lines:?}"
    );
    for line in &lines {
        assert!(
            line.starts_with("GET /repos/bound-org/bound-repo/contents/")
                && line.ends_with("?ref=main HTTP/1.1"),
            "a request left the bound repository or changed its query: {line}"
        );
    }
}

/// A capability that delegates to an agent has no actions: a `match` on one of its steps
/// would skip the step for every call (a guard that never runs), so it is refused at
/// `validate`, as a `match` naming an action its tool does not have is.
#[test]
fn match_on_a_delegated_agents_step_is_refused_at_validate() {
    let body = "capabilities:
  t/helper:
    before:
      - {match: t/helper, assert: \"false\"}
";
    let helper = scripted_agent("t/helper", "");
    let (_root, dir, _data) = dirs(&[
        ("helper.yaml", &helper),
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", "responses:\n  - text: ok\n"),
    ]);
    let (code, out, _) = agentmesh(&["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("`match`") && out.contains("delegates to agent `t/helper`"),
        "{out}"
    );
}

/// A tool `t/api` whose action `get` reads `http://127.0.0.1:{port}/`.
fn api_tool(port: u16) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: api
description: An API.
actions:
  - name: get
    description: Reads.
    execute:
      stateless_http: {{url: \"http://127.0.0.1:{port}/\"}}
"
    )
}

#[test]
fn after_steps_see_an_error_answer_before_the_llm_does() {
    // The API fails, with a body the `after` steps are there to keep from the LLM.
    let (port, _requests) = agentmesh_testkit::serve(1, |_| {
        (
            "500 Internal Server Error",
            r#"{"leak": "SECRET-123"}"#.into(),
        )
    });
    let body = "capabilities:
  api:
    after:
      - assert: \"!output.error.contains('SECRET')\"
        error_message: the answer was withheld
";
    let script = "responses:\n  - tool_calls: [{name: api, arguments: {}}]\n  - text: done\n";
    let (_root, dir, data) = dirs(&[
        ("api.yaml", &api_tool(port)),
        ("agent.yaml", &scripted_agent("t/a", body)),
        ("script.yaml", script),
    ]);
    let (code, task, err) = run(&dir, &data, "go", &[]);
    assert_eq!(code, Some(0), "{err}");
    let log = events(&data, &task);
    assert_eq!(
        results(&log),
        [json!({"rejected": "the answer was withheld"})]
    );
    let text = serde_json::to_string(&log).unwrap();
    assert!(!text.contains("SECRET-123"), "{text}");
}
