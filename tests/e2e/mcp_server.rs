//! The host as an MCP server: the official Python SDK's client (`mcp` from PyPI) lists and
//! calls an agent's Wasm tool through `agentmesh mcp` (stdio) and through `serve`'s `/mcp`
//! (streamable HTTP, behind bearer tokens). Each session is a task whose log holds the calls,
//! and whose capability steps refuse what they refuse for an LLM.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentmesh_testkit::client::{Request, Response};
use agentmesh_testkit::fixtures::{
    API_TOKEN_ENV, API_TOKENS, dirs, echo_tool, reviewed_agent, scripted_agent,
};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::agentmesh;
use crate::wasm::notes_tool;

/// The agent `t/a`: the `notes` Wasm tool, whose `before` step refuses the key `secret`.
fn notes_agent() -> String {
    scripted_agent(
        "t/a",
        "capabilities:
  notes:
    before:
      - assert: \"input.key != 'secret'\"
        error_message: No secrets.
",
    )
}

/// A config dir with the notes agent and `host` as its host config, and a data dir.
fn notes_dirs(host: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    dirs(&[
        ("host.yaml", host),
        ("tool.yaml", &notes_tool()),
        ("agent.yaml", &notes_agent()),
        ("script.yaml", "responses:\n  - text: unused\n"),
    ])
}

/// The calls every session makes: a put, a get of it, and a put the step refuses.
fn calls() -> Value {
    json!([
        {"name": "notes_put", "arguments": {"key": "k", "value": "v"}},
        {"name": "notes_get", "arguments": {"key": "k"}},
        {"name": "notes_put", "arguments": {"key": "secret", "value": "x"}},
    ])
}

/// The Python SDK client script.
fn sdk_client() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/sdk_client.py")
}

/// Runs the SDK client (`tests/mcp/sdk_client.py CALLS ARGS…`) and returns what it printed.
fn run_sdk_client(calls: &Value, args: &[&str]) -> Value {
    run_sdk_client_in(&[], calls, args)
}

/// [`run_sdk_client`] with the environment variables `env` added (a server it runs on stdio
/// inherits them).
pub fn run_sdk_client_in(env: &[(&str, &str)], calls: &Value, args: &[&str]) -> Value {
    let found = Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "the MCP Python SDK is missing: `python3 -m pip install mcp==2.3.0` (.ci/run installs it)"
    );
    let out = Command::new("python3")
        .arg(sdk_client())
        .arg(calls.to_string())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "the SDK client printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// What a session's calls must have given: the note stored and read back, the secret refused
/// by the step; only the capability's functions are listed, with their input schemas.
fn assert_session(session: &Value) {
    assert_eq!(session["protocol"], "2025-11-25", "{session}");
    let tools = session["tools"].as_object().unwrap();
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["notes_get", "notes_put"], "{session}");
    assert_eq!(
        tools["notes_put"]["properties"]["key"]["type"], "string",
        "{session}"
    );
    let results = &session["results"];
    assert_eq!(results[0]["is_error"], false, "{session}");
    assert_eq!(results[0]["structured"], json!({"stored": "k"}));
    assert_eq!(results[1]["structured"], json!({"key": "k", "value": "v"}));
    assert_eq!(results[2]["is_error"], true, "{session}");
    assert!(
        results[2]["text"].as_str().unwrap().contains("No secrets."),
        "{session}"
    );
}

/// The task's log, as `agentmesh events` prints it from `data`.
fn log_of(data: &Path, task: &str) -> Vec<Value> {
    let (code, out, err) = agentmesh(&["events", "--data", data.to_str().unwrap(), task]);
    assert_eq!(code, Some(0), "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The log holds each call as the client's `ActionEvent`, answered as an LLM's call is: two
/// observations and one refusal; the session's end ended the task.
fn assert_logged(log: &[Value]) {
    let kinds = |kind: &str| -> Vec<&Value> { log.iter().filter(|e| e["kind"] == kind).collect() };
    let actions = kinds("ActionEvent");
    assert_eq!(actions.len(), 3, "{log:?}");
    assert!(actions.iter().all(|a| a["source"] == "user"), "{log:?}");
    assert_eq!(actions[1]["tool_call"]["name"], "notes_get");
    assert_eq!(kinds("ObservationEvent").len(), 2, "{log:?}");
    let refused = kinds("UserRejectObservation");
    assert_eq!(refused.len(), 1, "{log:?}");
    assert_eq!(refused[0]["reason"], "No secrets.");
    let states: Vec<&Value> = kinds("ConversationStateUpdateEvent")
        .into_iter()
        .filter(|e| e["key"] == "client_session")
        .collect();
    assert_eq!(states.len(), 2, "opened and closed: {log:?}");
    assert_eq!(log.last().unwrap()["value"], "terminated", "{log:?}");
}

#[test]
fn the_python_sdk_calls_a_wasm_tool_through_agentmesh_mcp_on_stdio() {
    let (_root, dir, data) = notes_dirs("");
    let session = run_sdk_client(
        &calls(),
        &[
            "stdio",
            AGENTMESH,
            "mcp",
            dir.to_str().unwrap(),
            "--agent",
            "t/a",
            "--data",
            data.to_str().unwrap(),
        ],
    );
    assert_session(&session);
    let task = session["task_id"].as_str().expect("the task id in `_meta`");
    assert_logged(&log_of(&data, task));
}

#[test]
fn agentmesh_mcp_refuses_an_unknown_agent_before_reading_stdin() {
    let (_root, dir, data) = notes_dirs("");
    let (code, out, err) = agentmesh(&[
        "mcp",
        dir.to_str().unwrap(),
        "--agent",
        "t/nobody",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "nothing but the protocol on stdout: {out}");
    assert!(err.contains("t/nobody"), "{err}");
}

const TOKENS: &str = "kind: agentmesh/v1/host
policy: {max_body_bytes: 4096}
api_tokens:
  - {subject: \"user:ann\", role: agent_user, env: ANN_TOKEN}
  - {subject: \"user:bob\", role: agent_user, env: BOB_TOKEN}
  - {subject: \"user:eve\", role: read_only, env: EVE_TOKEN}
";

const ENV: [(&str, &str); 3] = [
    ("ANN_TOKEN", "ann-secret-token"),
    ("BOB_TOKEN", "bob-secret-token"),
    ("EVE_TOKEN", "eve-secret-token"),
];

/// `serve` with the notes agent and three tokens.
fn serving() -> (tempfile::TempDir, PathBuf, Server) {
    let (root, dir, data) = notes_dirs(TOKENS);
    let server = Server::start(AGENTMESH, &dir, &data, &ENV);
    (root, data, server)
}

#[test]
fn the_python_sdk_calls_a_wasm_tool_through_serve_mcp_as_the_tokens_subject() {
    let (_root, data, server) = serving();
    let url = format!("http://{}/mcp?agent=t/a", server.addr);
    let session = run_sdk_client(&calls(), &["http", &url, "ann-secret-token"]);
    assert_session(&session);
    let task = session["task_id"].as_str().expect("the task id in `_meta`");
    // The session's task is in the task API, owned by the token's subject, ended with it.
    let seen = server
        .request("GET", &format!("/v1/tasks/{task}"))
        .header("authorization", "Bearer ann-secret-token")
        .send();
    assert_eq!(seen.status, 200, "{}", seen.text());
    let seen = seen.json();
    assert_eq!(seen["owner"], "user:ann");
    assert_eq!(seen["status"], "terminated");
    assert_eq!(seen["reason"], "deleted");
    assert_eq!(seen["allow_list"]["t/notes"]["key"], json!(["k"]));
    let other = server
        .request("GET", &format!("/v1/tasks/{task}"))
        .header("authorization", "Bearer bob-secret-token")
        .send();
    assert_eq!(other.status, 404, "another agent_user does not see it");
    // Stopped as an operator stops it (its writes flushed), then its log read from disk.
    assert_eq!(server.terminate(), Some(0));
    assert_logged(&log_of(&data, task));
}

/// The session id an `initialize` answer names.
fn session_id(opened: &Response) -> String {
    opened
        .headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no session id: {}", opened.text()))
}

/// An `initialize` request's body.
fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
}

#[test]
fn serve_mcp_needs_a_writing_token_an_agent_and_the_sessions_own_caller() {
    let (_root, _data, server) = serving();
    let post = |path: &str, token: Option<&str>, body: &Value| {
        let mut r = server
            .request("POST", path)
            .header("accept", "application/json, text/event-stream")
            .json(body);
        if let Some(t) = token {
            r = r.header("authorization", &format!("Bearer {t}"));
        }
        r.send()
    };
    let path = "/mcp?agent=t/a";
    assert_eq!(post(path, None, &initialize()).status, 401);
    assert_eq!(post(path, Some("wrong"), &initialize()).status, 401);
    let read_only = post(path, Some("eve-secret-token"), &initialize());
    assert_eq!(read_only.status, 403, "{}", read_only.text());
    let no_agent = post("/mcp", Some("ann-secret-token"), &initialize());
    assert_eq!(no_agent.status, 400, "{}", no_agent.text());
    assert!(no_agent.text().contains("agent=ns/name"));
    // The API's body cap holds on `/mcp` too.
    let mut big = initialize();
    big["params"]["clientInfo"]["name"] = json!("x".repeat(8192));
    let too_large = post(path, Some("ann-secret-token"), &big);
    assert_eq!(too_large.status, 413, "{}", too_large.text());
    assert_eq!(too_large.json()["error"]["code"], "too_large");
    let unknown = post(
        "/mcp?agent=t/nobody",
        Some("ann-secret-token"),
        &initialize(),
    );
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    // Ann opens a session; Bob, holding its id, cannot use it.
    let opened = post(path, Some("ann-secret-token"), &initialize());
    assert_eq!(opened.status, 200, "{}", opened.text());
    let session = session_id(&opened);
    let in_session = |token: &str, body: &Value| {
        server
            .request("POST", path)
            .header("accept", "application/json, text/event-stream")
            .header("authorization", &format!("Bearer {token}"))
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .json(body)
            .send()
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = in_session("ann-secret-token", &initialized);
    assert_eq!(sent.status, 202, "{}", sent.text());
    let put = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "notes_put", "arguments": {"key": "k", "value": "v"}}});
    let as_ann = in_session("ann-secret-token", &put);
    assert!(as_ann.text().contains("stored"), "{}", as_ann.text());
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "notes_get", "arguments": {"key": "k"}}});
    // Bob holds Ann's session id: he can neither call in it, nor stream it, nor close it.
    let as_bob = in_session("bob-secret-token", &call);
    assert_eq!(as_bob.status, 404, "{}", as_bob.text());
    assert!(!as_bob.text().contains("\"value\""), "{}", as_bob.text());
    for method in ["GET", "DELETE"] {
        let by_bob = server
            .request(method, path)
            .header("accept", "application/json, text/event-stream")
            .header("authorization", "Bearer bob-secret-token")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .send();
        assert_eq!(by_bob.status, 404, "{method}: {}", by_bob.text());
    }
    // Ann's session is intact.
    let as_ann = in_session("ann-secret-token", &call);
    assert_eq!(as_ann.status, 200, "{}", as_ann.text());
    assert!(
        as_ann.text().contains("\"value\":\"v\""),
        "{}",
        as_ann.text()
    );
}

#[test]
fn an_agent_calls_another_hosts_wasm_tool_through_its_mcp_server() {
    // Host A serves its notes agent over MCP; host B's agent has an `mcp` tool whose stdio
    // server is `agentmesh mcp` on A: B's LLM calls reach A's Wasm tool through A's steps.
    let (_root_a, dir_a, data_a) = notes_dirs("");
    let remote = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: remote
description: The notes of another host.
mcp:
  transport: stdio
  command: {AGENTMESH}
  args: [mcp, {}, --agent, t/a, --data, {}]
actions:
  - name: put
    description: Store a note.
    parameters: {{type: object, properties: {{key: {{type: string}}, value: {{type: string}}}}}}
    execute: {{mcp: {{tool_name: notes_put}}}}
  - name: get
    description: Read a note.
    parameters: {{type: object, properties: {{key: {{type: string}}}}}}
    execute: {{mcp: {{tool_name: notes_get}}}}
",
        dir_a.display(),
        data_a.display()
    );
    let script = "responses:
  - tool_calls: [{name: remote_put, arguments: {key: k, value: v}}]
  - tool_calls: [{name: remote_get, arguments: {key: k}}]
  - tool_calls: [{name: remote_put, arguments: {key: secret, value: x}}]
  - text: done
";
    let (_root_b, dir_b, data_b) = dirs(&[
        ("tool.yaml", &remote),
        (
            "agent.yaml",
            &scripted_agent("t/b", "capabilities:\n  remote: \"*\"\n"),
        ),
        ("script.yaml", script),
    ]);
    let task = crate::util::run_json(&dir_b, "t/b", "go", &data_b, &[]);
    assert_eq!(task["status"], "idle", "{task}");
    let results = crate::util::observations(&crate::util::events(&data_b, &task));
    assert_eq!(results[0], json!({"stored": "k"}), "{results:?}");
    assert_eq!(results[1], json!({"key": "k", "value": "v"}), "{results:?}");
    // A's step refused the secret: B's LLM sees a tool error saying why.
    assert!(
        results[2].to_string().contains("No secrets."),
        "{results:?}"
    );
}

/// `serve` with [`TOKENS`] and agent `t/a` on the notes tool with `guardrails` (YAML under
/// `guardrails:`): the roots of its dirs, its data dir, the server and its `/mcp` URL for `t/a`.
fn guarded_notes(guardrails: &str) -> (tempfile::TempDir, PathBuf, Server, String) {
    let guarded = scripted_agent(
        "t/a",
        &format!("capabilities:\n  notes: \"*\"\nguardrails:\n{guardrails}"),
    );
    let (root, dir, data) = dirs(&[
        ("host.yaml", TOKENS),
        ("tool.yaml", &notes_tool()),
        ("agent.yaml", &guarded),
        ("script.yaml", "responses:\n  - text: unused\n"),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &ENV);
    let url = format!("http://{}/mcp?agent=t/a", server.addr);
    (root, data, server, url)
}

#[test]
fn a_clients_calls_pass_the_agents_guardrails_as_a_turn_does() {
    // The agent's guardrails wrap each call of a client as they wrap a turn: `before` sees the
    // call's arguments as the arriving message (and may refuse the caller, or replace what is
    // sent), `after` sees the result as the answer going out.
    let (_root, data, server, url) = guarded_notes(
        "  before:
    - assert: \"context.user.id != 'user:bob'\"
      error_message: Not for bob.
    - transform: \"input.message[0].text.replace('hunter2', '***')\"
  after:
    - transform: \"'checked: ' + output.message[0].text\"
",
    );
    let calls = json!([
        {"name": "notes_put", "arguments": {"key": "k", "value": "pw hunter2"}},
        {"name": "notes_get", "arguments": {"key": "k"}},
    ]);
    let ann = run_sdk_client(&calls, &["http", &url, "ann-secret-token"]);
    let results = &ann["results"];
    assert_eq!(results[1]["is_error"], false, "{ann}");
    assert_eq!(
        results[1]["text"], r#"checked: {"key":"k","value":"pw ***"}"#,
        "the before transform replaced the stored value, the after one the answer: {ann}"
    );
    assert_eq!(results[1]["structured"], Value::Null, "{ann}");
    let bob = run_sdk_client(&calls, &["http", &url, "bob-secret-token"]);
    let results = &bob["results"];
    assert_eq!(results[0]["is_error"], true, "{bob}");
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap()
            .contains("Not for bob."),
        "{bob}"
    );
    assert_eq!(results[1]["is_error"], true, "the task is locked: {bob}");
    let bobs = bob["task_id"].as_str().unwrap().to_owned();
    let anns = ann["task_id"].as_str().unwrap().to_owned();
    let seen = server
        .request("GET", &format!("/v1/tasks/{bobs}"))
        .header("authorization", "Bearer bob-secret-token")
        .send()
        .json();
    assert_eq!(seen["reason"], "locked", "{seen}");
    assert_eq!(server.terminate(), Some(0));
    let bobs = log_of(&data, &bobs);
    assert!(
        !bobs.iter().any(|e| e["kind"] == "ObservationEvent"),
        "Bob's call never ran: {bobs:?}"
    );
    let anns = log_of(&data, &anns);
    assert!(
        !anns.iter().any(|e| e.to_string().contains("hunter2")),
        "the original arguments are not stored: {anns:?}"
    );
}

#[test]
fn a_client_is_not_shown_what_the_after_guardrails_refuse_nor_sent_what_is_not_arguments() {
    // `after` refuses an answer holding `forbidden`: the client is not shown it, and the task
    // is locked, as a turn whose answer `after` refuses. `before` replaces Bob's arguments with
    // text that holds no JSON object: his calls are refused, and the tool never runs.
    let (_root, data, server, url) = guarded_notes(
        "  before:
    - transform: \"context.user.id == 'user:bob' ? 'no arguments' : input.message[0].text\"
  after:
    - assert: \"!output.message[0].text.contains('forbidden')\"
      error_message: Withheld.
",
    );
    let calls = json!([
        {"name": "notes_put", "arguments": {"key": "k", "value": "forbidden"}},
        {"name": "notes_get", "arguments": {"key": "k"}},
        {"name": "notes_get", "arguments": {"key": "k"}},
    ]);
    let ann = run_sdk_client(&calls, &["http", &url, "ann-secret-token"]);
    let results = ann["results"].as_array().unwrap();
    assert_eq!(results[0]["is_error"], false, "{ann}");
    assert_eq!(results[1]["is_error"], true, "{ann}");
    assert!(
        results[1]["text"].as_str().unwrap().contains("Withheld."),
        "{ann}"
    );
    assert!(
        results.iter().all(|r| !r.to_string().contains("forbidden")),
        "the refused answer is not shown: {ann}"
    );
    assert_eq!(results[2]["is_error"], true, "the task is locked: {ann}");
    let anns = ann["task_id"].as_str().unwrap().to_owned();
    let seen = server
        .request("GET", &format!("/v1/tasks/{anns}"))
        .header("authorization", "Bearer ann-secret-token")
        .send()
        .json();
    assert_eq!(seen["reason"], "locked", "{seen}");

    let bob = run_sdk_client(&calls, &["http", &url, "bob-secret-token"]);
    let results = bob["results"].as_array().unwrap();
    for result in results {
        assert_eq!(result["is_error"], true, "{bob}");
        assert!(
            result["text"]
                .as_str()
                .unwrap()
                .contains("not a JSON object"),
            "{bob}"
        );
    }
    let bobs = bob["task_id"].as_str().unwrap().to_owned();
    assert_eq!(server.terminate(), Some(0));
    let anns = log_of(&data, &anns);
    let ran = anns
        .iter()
        .filter(|e| e["kind"] == "ObservationEvent")
        .count();
    assert_eq!(ran, 2, "the third call never ran: {anns:?}");
    let bobs = log_of(&data, &bobs);
    assert!(
        !bobs.iter().any(|e| e["kind"] == "ObservationEvent"),
        "Bob's calls never ran: {bobs:?}"
    );
    let refused = bobs
        .iter()
        .filter(|e| e.to_string().contains("not a JSON object"))
        .count();
    assert_eq!(refused, 3, "each refusal is logged: {bobs:?}");
}

/// A `serve` of `lab/careful`, whose one tool, `echo`, waits for `user:ops` to approve each
/// call (its LLM answers `LLM RAN`, if ever asked), and a session of alice's on its `/mcp`.
struct Reviewed {
    _root: tempfile::TempDir,
    data: PathBuf,
    server: Server,
    session: Session,
}

/// The JSON-RPC message an MCP answer carries: its body, or the event of its stream that holds
/// one.
fn message(answer: &Response) -> Value {
    let text = answer.text();
    serde_json::from_str(&text)
        .ok()
        .or_else(|| {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .find_map(|d| serde_json::from_str(d.trim()).ok())
        })
        .unwrap_or_else(|| panic!("no JSON-RPC message in the answer: {text}"))
}

/// An initialized MCP session of alice's on a server at `addr`, and its task.
struct Session {
    addr: SocketAddr,
    id: String,
    task: String,
}

impl Reviewed {
    fn start() -> Reviewed {
        Reviewed::with_policy("")
    }

    /// Started with `policy` in the host config (`key: value, ...`).
    fn with_policy(policy: &str) -> Reviewed {
        let host = format!("{API_TOKENS}policy: {{{policy}}}\n");
        let (root, dir, data) = dirs(&[
            ("echo.yaml", &echo_tool("lab")),
            ("agent.yaml", &reviewed_agent("lab/careful", "script.yaml")),
            ("script.yaml", "responses:\n  - text: LLM RAN\n"),
            ("host.yaml", &host),
        ]);
        let server = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
        let session = Session::open(server.addr);
        Reviewed {
            _root: root,
            data,
            server,
            session,
        }
    }
}

impl Session {
    fn open(addr: SocketAddr) -> Session {
        let opened = Request::new(addr, "POST", "/mcp?agent=lab/careful")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", "Bearer alice-token")
            .json(&initialize())
            .send();
        assert_eq!(opened.status, 200, "{}", opened.text());
        let id = session_id(&opened);
        let task = message(&opened)["result"]["_meta"]["agentmesh/task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("the task id in `_meta`: {}", opened.text()))
            .to_owned();
        let session = Session { addr, id, task };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(session.post(&initialized).status, 202);
        session
    }

    /// Sends `body` in the session as alice (it panics when nothing answers within 20 s).
    fn post(&self, body: &Value) -> Response {
        Request::new(self.addr, "POST", "/mcp?agent=lab/careful")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", "Bearer alice-token")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .json(body)
            .send()
    }

    /// Sends a `tools/call` of `echo` with request id `id`.
    fn echo(&self, id: u64) -> Response {
        self.post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": format!("call {id}")}}}))
    }

    /// The reviews `user:ops` is asked for.
    fn reviews(&self) -> Vec<Value> {
        let listed = Request::new(self.addr, "GET", "/v1/reviews")
            .header("authorization", "Bearer ops-token")
            .send()
            .json();
        listed["reviews"].as_array().cloned().unwrap_or_default()
    }

    /// The id of the review the session's task waits in, other than `not`, once listed.
    fn review(&self, not: Option<&str>) -> String {
        wait_for(Duration::from_secs(30), || {
            self.reviews().iter().find_map(|r| {
                let id = r["review_id"].as_str()?;
                (r["task_id"] == self.task.as_str() && Some(id) != not).then(|| id.to_owned())
            })
        })
        .unwrap_or_else(|| panic!("no review of task {} is listed", self.task))
    }

    /// `user:ops` decides review `id`.
    fn decide(&self, id: &str, approve: bool) {
        let path = format!("/v1/tasks/{}/reviews/{id}", self.task);
        let decided = Request::new(self.addr, "POST", &path)
            .header("authorization", "Bearer ops-token")
            .json(&json!({"approve": approve}))
            .send();
        assert_eq!(decided.status, 200, "{}", decided.text());
    }

    /// The session's task, as alice reads it.
    fn task(&self) -> Value {
        Request::new(self.addr, "GET", &format!("/v1/tasks/{}", self.task))
            .header("authorization", "Bearer alice-token")
            .send()
            .json()
    }
}

#[test]
fn a_clients_call_that_waited_in_a_review_leaves_its_session_task_idle() {
    let Reviewed {
        _root,
        server: _server,
        session: s,
        ..
    } = Reviewed::start();
    assert_eq!(s.task()["status"], "idle");
    std::thread::scope(|scope| {
        let call = scope.spawn(|| s.echo(5));
        s.decide(&s.review(None), true);
        let answer = call.join().unwrap();
        assert!(answer.text().contains("call 5"), "{}", answer.text());
    });
    let seen = s.task();
    assert_eq!(
        seen["status"], "idle",
        "nothing runs once the call answered: {seen}"
    );
    // The next call is reviewed again, and denied.
    std::thread::scope(|scope| {
        let call = scope.spawn(|| s.echo(6));
        s.decide(&s.review(None), false);
        let answer = call.join().unwrap();
        assert!(answer.text().contains("Not approved."), "{}", answer.text());
    });
    assert_eq!(s.task()["status"], "idle");
}

#[test]
fn a_session_whose_call_waits_outlives_the_idle_limit_and_a_quiet_one_does_not() {
    let Reviewed {
        _root,
        server,
        session: s,
        ..
    } = Reviewed::with_policy("mcp_session_idle: 2s");
    std::thread::scope(|scope| {
        let call = scope.spawn(|| s.echo(9));
        let review = s.review(None);
        // The call waits three idle limits for its review, with no request in the session.
        std::thread::sleep(Duration::from_secs(6));
        s.decide(&review, true);
        let answer = call.join().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(answer.text().contains("call 9"), "{}", answer.text());
    });
    // Its task is still the session's, and idle.
    assert_eq!(s.task()["status"], "idle");
    let listed = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"});
    assert_eq!(s.post(&listed).status, 200);
    // Left quiet past the limit, the session is closed and its task ends.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        s.post(&listed).status,
        404,
        "the quiet session is still open"
    );
    let ended = wait_for(Duration::from_secs(10), || {
        (s.task()["status"] == "terminated").then_some(())
    });
    assert!(ended.is_some(), "its task did not end: {}", s.task());
    // A new session opens as before.
    let again = Session::open(server.addr);
    assert_ne!(again.id, s.id);
}

/// How a host goes down.
#[derive(Clone, Copy)]
enum Down {
    /// SIGTERM: the client's stream ends first, which cancels its call.
    Stopped,
    /// SIGKILL, once the review request is on disk: the call is still waiting at the restart.
    Killed,
}

/// A session's call waits in a review when the host goes down (`down`); after a restart, the
/// session's task has ended: it neither waits for the review nor resumes as a turn of the
/// agent's LLM, and its call has an answer in the log.
fn a_session_task_ends_with_its_host(down: Down) {
    let Reviewed {
        _root,
        data,
        server,
        session: s,
    } = Reviewed::start();
    std::thread::scope(|scope| {
        let call = scope.spawn(|| s.echo(11));
        s.review(None);
        match down {
            Down::Stopped => assert_eq!(server.terminate(), Some(0)),
            Down::Killed => {
                // The review request is flushed just after the write that lists it.
                std::thread::sleep(Duration::from_secs(1));
                server.kill();
            }
        }
        // The call's stream ended with the host: it gets no answer.
        let _ = call.join();
    });
    let dir = _root.path().join("config");
    let again = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
    let task = Request::new(again.addr, "GET", &format!("/v1/tasks/{}", s.task))
        .header("authorization", "Bearer alice-token")
        .send()
        .json();
    assert_eq!(task["status"], "terminated", "{task}");
    assert_eq!(task["reason"], "deleted", "{task}");
    let listed = Request::new(again.addr, "GET", "/v1/reviews")
        .header("authorization", "Bearer ops-token")
        .send()
        .json();
    assert_eq!(listed["reviews"], json!([]), "{listed}");
    assert_eq!(again.terminate(), Some(0));
    let log = log_of(&data, &s.task);
    assert!(
        !log.iter()
            .any(|e| e["kind"] == "MessageEvent" && e["source"] == "agent"),
        "the LLM ran: {log:?}"
    );
    let answered = log.iter().any(|e| {
        [
            "UserRejectObservation",
            "AgentErrorEvent",
            "ObservationEvent",
        ]
        .contains(&e["kind"].as_str().unwrap_or(""))
    });
    assert!(answered, "the call has no answer: {log:?}");
    let closed = log
        .iter()
        .any(|e| e["key"] == "client_session" && e["value"]["closed"] == true);
    assert!(closed, "the session's end is not logged: {log:?}");
}

#[test]
fn a_host_that_stops_while_a_clients_call_waits_in_a_review_ends_the_sessions_task() {
    a_session_task_ends_with_its_host(Down::Stopped);
}

#[test]
fn a_host_killed_while_a_clients_call_waits_in_a_review_ends_the_sessions_task_at_restart() {
    a_session_task_ends_with_its_host(Down::Killed);
}

#[test]
fn a_call_its_client_cancels_stops_waiting_in_its_review_and_frees_the_session() {
    let Reviewed {
        _root,
        data,
        server,
        session: s,
    } = Reviewed::start();
    std::thread::scope(|scope| {
        let call = scope.spawn(|| s.echo(7));
        let first = s.review(None);
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "the user gave up"}});
        assert_eq!(s.post(&cancel).status, 202);
        // The review is withdrawn: nobody waits for its decision any more.
        let withdrawn = wait_for(Duration::from_secs(10), || {
            s.reviews().is_empty().then_some(())
        });
        assert!(withdrawn.is_some(), "review {first} is still pending");
        // The session's next call runs: it is not queued behind the cancelled one.
        let next = scope.spawn(|| s.echo(8));
        s.decide(&s.review(Some(&first)), true);
        let answer = next.join().unwrap();
        assert!(answer.text().contains("call 8"), "{}", answer.text());
        // What a cancelled request is answered, if anything, nobody reads.
        let _ = call.join();
    });
    assert_eq!(s.task()["status"], "idle");
    assert_eq!(server.terminate(), Some(0));
    let log = log_of(&data, &s.task);
    let decisions: Vec<_> = log
        .iter()
        .filter(|e| e["kind"] == "ReviewDecisionEvent")
        .map(|e| (e["approve"].clone(), e["decided_by"].clone()))
        .collect();
    assert_eq!(
        decisions,
        [
            (json!(false), json!("cancelled")),
            (json!(true), json!("user:ops"))
        ],
        "{log:?}"
    );
    let observed = log
        .iter()
        .filter(|e| e["kind"] == "ObservationEvent")
        .count();
    assert_eq!(observed, 1, "only the second call ran: {log:?}");
}

#[test]
fn a_stopped_host_ends_the_mcp_streams_its_clients_hold_open() {
    let Reviewed {
        _root,
        mut server,
        session: s,
        ..
    } = Reviewed::start();
    // The client's stream for messages the server sends unasked (a GET in the session), held
    // open as MCP clients hold it.
    let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
    write!(
        stream,
        "GET /mcp?agent=lab/careful HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\
         Authorization: Bearer alice-token\r\nMcp-Session-Id: {}\r\n\
         Mcp-Protocol-Version: 2025-11-25\r\n\r\n",
        s.addr, s.id
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = [0; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "the stream is open");
    // SIGTERM: the host drains what is in flight and exits, the open stream ended.
    assert_eq!(server.stop_within(Duration::from_secs(10)), Some(0));
}

/// An `initialize` on `addr`'s `/mcp` as `token`'s caller.
fn open_as(addr: SocketAddr, token: &str) -> Response {
    Request::new(addr, "POST", "/mcp?agent=lab/careful")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", &format!("Bearer {token}"))
        .json(&initialize())
        .send()
}

#[test]
fn a_caller_holds_at_most_its_share_of_mcp_sessions_and_closing_one_frees_its_place() {
    let Reviewed {
        _root,
        server,
        session,
        ..
    } = Reviewed::start();
    // Alice holds one session; 31 more reach the default of 32 a caller may hold.
    let mut ids = vec![session.id.clone()];
    for _ in 1..32 {
        let opened = open_as(server.addr, "alice-token");
        assert_eq!(opened.status, 200, "{}", opened.text());
        ids.push(session_id(&opened));
    }
    let refused = open_as(server.addr, "alice-token");
    assert_eq!(refused.status, 429, "{}", refused.text());
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "too_many_sessions");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("user:alice") && message.contains("mcp_sessions_per_caller"),
        "{message}"
    );
    // Another caller is not held back by alice's sessions.
    assert_eq!(open_as(server.addr, "bob-token").status, 200);
    // Alice's sessions still work, and closing one frees its place.
    let listed = session.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    assert!(listed.text().contains("echo"), "{}", listed.text());
    let closed = Request::new(server.addr, "DELETE", "/mcp?agent=lab/careful")
        .header("authorization", "Bearer alice-token")
        .header("mcp-session-id", &ids[1])
        .header("mcp-protocol-version", "2025-11-25")
        .send();
    assert_eq!(closed.status, 204, "{}", closed.text());
    let reopened = open_as(server.addr, "alice-token");
    assert_eq!(reopened.status, 200, "{}", reopened.text());
    assert_eq!(open_as(server.addr, "alice-token").status, 429);
}

#[test]
fn the_policy_sets_how_many_mcp_sessions_a_caller_may_hold() {
    let Reviewed { _root, server, .. } = Reviewed::with_policy("mcp_sessions_per_caller: 1");
    let refused = open_as(server.addr, "alice-token");
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(
        refused.text().contains("holds 1 open"),
        "{}",
        refused.text()
    );
}
