//! Secrets never leave: a `format: password` setting, every `{env: …}` value of the host
//! config and a model's API key appear in no event, API answer, SSE frame, metric, log line
//! or printed output. Where one would have been, `***` stands.

use std::io::BufRead;
use std::time::Duration;

use agentmesh_testkit::fixtures::config_dir;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::mcp_server::run_sdk_client_in;
use crate::util::{Env, agentmesh_in, run_in};
use crate::wasm::gh_tool;

/// The API key of the tool, read from the environment.
const API_KEY: &str = "sk-live-7f3a9c2e51d8";
/// A password setting given literally in the host config.
const SIGNING: &str = "literal-signing-pw-0042";
/// The model provider's API key, read from the environment.
const MODEL_KEY: &str = "sk-model-b61e0d4490aa";

const ENV: [(&str, &str); 3] = [
    ("AGENTMESH_TEST_API_KEY", API_KEY),
    ("AGENTMESH_TEST_MODEL_KEY", MODEL_KEY),
    ("AGENTMESH_LOG", "debug"),
];

/// The environment of `agentmesh`: [`ENV`].
fn secrets_env() -> Env<'static> {
    Env {
        vars: &ENV,
        ..Env::default()
    }
}

/// Panics when `text` (from `what`) holds any of the secrets.
fn assert_clean(what: &str, text: &str) {
    for secret in [API_KEY, SIGNING, MODEL_KEY] {
        assert!(
            !text.contains(secret),
            "{what} shows the secret `{secret}`:\n{text}"
        );
    }
}

/// A fake REST API answering `requests` requests: `/echo` answers what it was sent (its
/// `authorization` header and path), `/fail` is a 500 whose error repeats the path.
fn fake_api(requests: usize) -> u16 {
    let (port, received) = agentmesh_testkit::serve(requests, |r| {
        let path = r.request_line.clone();
        if path.contains("/fail") {
            (
                "500 Internal Server Error",
                json!({"error": format!("refused {path}")}).to_string(),
            )
        } else {
            let auth = r.header("authorization").unwrap_or_default().to_owned();
            (
                "200 OK",
                json!({"you_sent": auth, "path": path}).to_string(),
            )
        }
    });
    // Kept for as long as the test runs: the server stops at the first request after it goes.
    std::mem::forget(received);
    port
}

/// The head of a tool `t/api` with the settings `api_key` (a password) and `base`; its other
/// settings and its actions follow.
const API_TOOL: &str = "kind: commonagents.info/v1beta2/tool
namespace: t
name: api
description: A REST API with a key.
settings:
  type: object
  properties:
    api_key: {type: string, format: password}
    base: {type: string}
";

/// A host config with the tool's secrets, a tool `t/api` whose actions echo, fail with, and
/// cannot reach a URL holding them, and an agent `t/a` calling each in turn.
fn secrets_config(port: u16) -> tempfile::TempDir {
    let host = format!(
        "kind: agentmesh/v1/host
settings:
  t:
    api:
      api_key: {{env: AGENTMESH_TEST_API_KEY}}
      signing: {SIGNING}
      base: http://127.0.0.1:{port}
"
    );
    // The password stands in a description too: what lists the functions hides it there.
    let tool = API_TOOL.to_owned()
        + "    signing: {type: string, format: password}
actions:
  - name: echo
    description: Answers what it was sent, signed with "
        + SIGNING
        + ".
    execute:
      stateless_http:
        url: \"{settings.base}/echo?sig={settings.signing}\"
        headers: {Authorization: \"Bearer {settings.api_key}\"}
  - name: fail
    description: Fails, repeating the key.
    execute: {stateless_http: {url: \"{settings.base}/fail?key={settings.api_key}\"}}
  - name: unreachable
    description: Nobody listens.
    execute: {stateless_http: {url: \"http://127.0.0.1:1/v1/items?key={settings.api_key}\"}}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Calls the API.
prompt: Go.
model: scripted/script.yaml
capabilities: {api: \"*\"}
";
    let script = "responses:
  - tool_calls: [{name: api_echo, arguments: {}}]
  - tool_calls: [{name: api_fail, arguments: {}}]
  - tool_calls: [{name: api_unreachable, arguments: {}}]
  - text: done
";
    config_dir(&[
        ("host.yaml", &host),
        ("all.yaml", &tool),
        ("script.yaml", script),
    ])
}

/// [`secrets_config`] on a fake API that answers twice, its data dir, and the environment
/// holding the secrets.
fn secrets_setup() -> (tempfile::TempDir, std::path::PathBuf, Env<'static>) {
    let dir = secrets_config(fake_api(2));
    let data = dir.path().join("data");
    (dir, data, secrets_env())
}

/// `agentmesh call DIR ACTION --data DIR/data` with [`ENV`]: exit code, stdout, stderr.
fn call_in(dir: &std::path::Path, action: &str) -> (Option<i32>, String, String) {
    let env = secrets_env();
    let data = dir.join("data");
    let (dir, data) = (dir.to_str().unwrap(), data.to_str().unwrap());
    agentmesh_in(&env, &["call", dir, action, "--data", data])
}

#[test]
fn run_shows_no_tool_secret_in_its_output_log_or_events() {
    let (dir, data, env) = secrets_setup();
    let (code, out, err) = run_in(&env, dir.path(), "t/a", "go", &data, &[]);
    assert_ne!(code, Some(1), "{err}");
    assert_clean("stdout", &out);
    assert_clean("stderr", &err);
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("task: "))
        .unwrap_or_else(|| panic!("no task id in {err}"));
    let (code, events, err) = agentmesh_in(
        &env,
        &["events", "--data", data.to_str().unwrap(), id.trim()],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_clean("the event log", &events);
    // Where the secrets were, `***` stands: in the echo, and in the URL of the error (the
    // failing call's or, when the task goes on, the unreachable one's).
    assert!(events.contains("Bearer ***"), "{events}");
    assert!(events.contains("sig=***"), "{events}");
    assert!(events.contains("?key=***"), "{events}");
}

/// `agentmesh call` prints an action's answer and a failed call's error as `run` prints a
/// task's: with `***` where a secret was.
#[test]
fn call_shows_no_tool_secret_in_its_answer_or_error() {
    let (dir, data, env) = secrets_setup();
    let config = dir.path().to_str().unwrap();
    let data = data.to_str().unwrap();
    let (code, out, err) = agentmesh_in(&env, &["call", config, "t/api.echo", "--data", data]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_clean("call's stdout", &out);
    assert_clean("call's stderr", &err);
    assert!(out.contains("Bearer ***"), "{out}");
    let (code, out, err) = agentmesh_in(&env, &["call", config, "t/api.fail", "--data", data]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_clean("call's stdout", &out);
    assert_clean("call's stderr", &err);
    assert!(err.contains("key=***"), "{err}");
}

#[test]
fn a_component_that_echoes_a_password_setting_is_scrubbed() {
    let (port, _received) = agentmesh_testkit::serve(1, |r| {
        let auth = r.header("authorization").unwrap_or_default().to_owned();
        (
            "201 Created",
            json!({"number": 7, "echo": auth}).to_string(),
        )
    });
    let tool = gh_tool(port, "{type: string, format: password}")
        + "kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Opens pull requests.
prompt: Go.
model: scripted/script.yaml
capabilities: {gh: \"*\"}
";
    let dir = config_dir(&[
        (
            "host.yaml",
            &format!("kind: agentmesh/v1/host\nsettings: {{t: {{gh: {{token: {SIGNING}}}}}}}\n"),
        ),
        ("all.yaml", &tool),
        (
            "script.yaml",
            "responses:
  - tool_calls: [{name: gh, arguments: {owner: acme, repo: web, title: T, head: h}}]
  - text: done
",
        ),
    ]);
    let data = dir.path().join("data");
    let env = secrets_env();
    let (code, out, err) = run_in(&env, dir.path(), "t/a", "go", &data, &["--json"]);
    assert_eq!(code, Some(0), "{err}");
    assert_clean("stderr", &err);
    assert_clean("the task object", &out);
    let task: Value = serde_json::from_str(&out).unwrap();
    let (_, events, _) = agentmesh_in(
        &env,
        &[
            "events",
            "--data",
            data.to_str().unwrap(),
            task["id"].as_str().unwrap(),
        ],
    );
    assert_clean("the event log", &events);
    assert!(events.contains("\"echo\":\"Bearer ***\""), "{events}");
}

/// A fake OpenAI-compatible endpoint whose model answers with the API key it was sent.
fn echoing_model() -> u16 {
    let (port, _received) = agentmesh_testkit::serve(1, |r| {
        let auth = r.header("authorization").unwrap_or_default().to_owned();
        let answer = json!({"id": "c1", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": format!("I was called with {auth}")}}]});
        ("200 OK", answer.to_string())
    });
    port
}

#[test]
fn serve_shows_no_secret_in_api_answers_sse_metrics_or_its_log() {
    let api = fake_api(2);
    let model = echoing_model();
    let dir = secrets_config(api);
    // A second agent on a model provider whose key is a secret too.
    std::fs::write(
        dir.path().join("host.yaml"),
        format!(
            "{}models:\n  fake: {{base_url: \"http://127.0.0.1:{model}/v1\", api_key: {{env: AGENTMESH_TEST_MODEL_KEY}}}}\n",
            std::fs::read_to_string(dir.path().join("host.yaml")).unwrap()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("echo.yaml"),
        "kind: commonagents.info/v1beta2/agent
namespace: t
name: talker
description: Talks to a remote model.
prompt: Talk.
model: fake/m
",
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &ENV);
    let mut seen = Vec::new();
    for agent in ["t/a", "t/talker"] {
        let id = server.create_task(&json!({"agent": agent, "input": {"message": "go"}}));
        let done = wait_for(Duration::from_secs(30), || {
            let t = server.request("GET", &format!("/v1/tasks/{id}")).send();
            let task = t.json();
            let answered = task["output"].as_array().is_some_and(|o| !o.is_empty());
            (answered || task["status"] == "terminated").then(|| t.text())
        })
        .unwrap_or_else(|| panic!("task {id} never finished"));
        seen.push(("the task object", done));
        let events = server
            .request("GET", &format!("/v1/tasks/{id}/events"))
            .send()
            .text();
        seen.push(("the events answer", events));
        seen.push(("the SSE stream", sse(&server, &id)));
    }
    let list = server.request("GET", "/v1/tasks").send().text();
    seen.push(("the task list", list));
    seen.push(("/metrics", server.request("GET", "/metrics").send().text()));
    seen.push((
        "/v1/status",
        server.request("GET", "/v1/status").send().text(),
    ));
    seen.push(("the log", server.terminate_with_log()));
    for (what, text) in &seen {
        assert_clean(what, text);
    }
    // `***` stands where the secrets were: in the tool's errors, and in the remote model's
    // answer, as logged (its events, live or not) and as the task's output.
    let [_, events, _, talker, talk, talk_live] = [0, 1, 2, 3, 4, 5].map(|i| &seen[i].1);
    assert!(events.contains("key=***"), "{events}");
    for text in [talker, talk, talk_live] {
        assert!(text.contains("I was called with Bearer ***"), "{text}");
    }
}

/// What a remote model is sent holds no secret: not in the system prompt, not in a function's
/// description or schema (given literally in the manifests here), not in a tool's answer.
#[test]
fn a_remote_model_is_sent_no_secret_in_its_prompt_functions_or_messages() {
    let api = fake_api(1);
    let (model, sent) = agentmesh_testkit::serve(2, |r| {
        let message = if r.body.contains("\"role\":\"tool\"") {
            json!({"role": "assistant", "content": "done"})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                "type": "function", "function": {"name": "api", "arguments": r#"{"key": "x"}"#}}]})
        };
        let answer = json!({"id": "c1", "choices": [{"index": 0, "message": message}]});
        ("200 OK", answer.to_string())
    });
    let host = format!(
        "kind: agentmesh/v1/host
models:
  fake: {{base_url: \"http://127.0.0.1:{model}/v1\", api_key: {{env: AGENTMESH_TEST_MODEL_KEY}}}}
settings:
  t:
    api:
      api_key: {{env: AGENTMESH_TEST_API_KEY}}
      signing: {SIGNING}
      base: http://127.0.0.1:{api}
"
    );
    let tool = format!(
        "{API_TOOL}    signing: {{type: string, format: password}}
actions:
  - name: echo
    description: Answers what it was sent; signed with {SIGNING}.
    parameters:
      type: object
      properties:
        key: {{type: string, description: \"Leave out; {API_KEY} is used.\"}}
    execute:
      stateless_http:
        url: \"{{settings.base}}/echo\"
        headers: {{Authorization: \"Bearer {{settings.api_key}}\"}}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Calls the API.
prompt: Go; the signing password is {SIGNING}.
model: fake/m
capabilities: {{api: \"*\"}}
"
    );
    let dir = config_dir(&[("host.yaml", &host), ("all.yaml", &tool)]);
    let data = dir.path().join("data");
    let env = secrets_env();
    let (code, out, err) = run_in(&env, dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let requests: Vec<_> = (0..2)
        .map(|_| sent.recv_timeout(Duration::from_secs(10)).unwrap().body)
        .collect();
    for body in &requests {
        assert_clean("a request to the model", body);
    }
    // `***` stands where the secrets were: the prompt and the function as the first request
    // has them, the tool's answer in the second.
    let first: Value = serde_json::from_str(&requests[0]).unwrap();
    assert_eq!(
        first["messages"][0]["content"],
        "Go; the signing password is ***."
    );
    let function = &first["tools"][0]["function"];
    assert_eq!(
        function["description"],
        "Answers what it was sent; signed with ***."
    );
    assert_eq!(
        function["parameters"]["properties"]["key"]["description"],
        "Leave out; *** is used."
    );
    assert!(requests[1].contains("Bearer ***"), "{}", requests[1]);
}

/// Task `id`'s events as a live SSE stream reads them, up to the agent's last message.
fn sse(server: &Server, id: &str) -> String {
    let (_, mut reader) = server.open_sse(id);
    let mut text = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return text;
        }
        text.push_str(&line);
        let last = line.contains("\"MessageEvent\"") && line.contains("\"source\":\"agent\"")
            || line.contains("\"status\",\"value\":\"terminated\"");
        if last {
            return text;
        }
    }
}

/// A tool key holding `"` and `\`, which JSON escapes: in the text of an MCP result, itself
/// sent as JSON, it stands escaped twice.
const QUOTED_KEY: &str = r#"sk-"quoted\key-91c4"#;

/// An MCP client — of `agentmesh mcp` on stdio and of `serve`'s `/mcp` — is answered a tool's
/// result and a failed call's error with `***` where a secret was, however the protocol
/// escapes them.
#[test]
fn an_mcp_client_sees_no_secret_in_a_result_or_an_error() {
    let dir = secrets_config(fake_api(2));
    let host = dir.path().join("host.yaml");
    let tokens = "api_tokens:\n  - {subject: \"user:ann\", role: agent_user, env: MCP_TOKEN}\n";
    let written = std::fs::read_to_string(&host).unwrap();
    std::fs::write(&host, format!("{written}{tokens}")).unwrap();
    let data = dir.path().join("data");
    let env = [
        ("AGENTMESH_TEST_API_KEY", QUOTED_KEY),
        ("MCP_TOKEN", "mcp-client-token-5e1d"),
    ];
    let calls = json!([
        {"name": "api_echo", "arguments": {}},
        {"name": "api_unreachable", "arguments": {}},
    ]);
    let stdio = run_sdk_client_in(
        &env,
        &calls,
        &[
            "stdio",
            AGENTMESH,
            "mcp",
            dir.path().to_str().unwrap(),
            "--agent",
            "t/a",
            "--data",
            data.to_str().unwrap(),
        ],
    );
    let server = Server::start(AGENTMESH, dir.path(), &data, &env);
    let url = format!("http://{}/mcp?agent=t/a", server.addr);
    let http = run_sdk_client_in(&[], &calls, &["http", &url, "mcp-client-token-5e1d"]);
    for session in [stdio, http] {
        // No form of the key, escaped once, twice or percent-encoded, holds its middle; the
        // functions are listed without the password of a description.
        assert!(!session.to_string().contains("quoted"), "{session}");
        assert!(!session.to_string().contains(SIGNING), "{session}");
        let echo = &session["descriptions"]["api_echo"];
        assert_eq!(
            echo, "Answers what it was sent, signed with ***.",
            "{session}"
        );
        let results = &session["results"];
        assert_eq!(results[0]["is_error"], false, "{session}");
        assert_eq!(results[0]["structured"]["you_sent"], "Bearer ***");
        assert!(results[0]["text"].as_str().unwrap().contains("Bearer ***"));
        assert_eq!(results[1]["is_error"], true, "{session}");
        let error = results[1]["text"].as_str().unwrap();
        assert!(error.contains("key=***"), "{session}");
    }
}

/// The host follows a redirect within the origin (scheme, host and port) a tool's URL names,
/// never to another one: the headers it fills from settings would reach a host the manifest
/// never named. A redirect elsewhere is the call's answer.
#[test]
fn a_redirect_is_followed_within_its_origin_only() {
    let (elsewhere, reached) = agentmesh_testkit::serve(1, |_| ("200 OK", "{}".to_owned()));
    let (port, received) = agentmesh_testkit::serve_located(3, move |r| {
        if r.request_line.contains("/moved") {
            ("302 Found", Some("/landed".to_owned()), String::new())
        } else if r.request_line.contains("/away") {
            let away = format!("http://localhost:{elsewhere}/collect");
            ("307 Temporary Redirect", Some(away), String::new())
        } else {
            ("200 OK", None, json!({"landed": true}).to_string())
        }
    });
    let host = format!(
        "kind: agentmesh/v1/host
settings: {{t: {{api: {{api_key: {{env: AGENTMESH_TEST_API_KEY}}, base: \"http://127.0.0.1:{port}\"}}}}}}
"
    );
    let tool = API_TOOL.to_owned()
        + "actions:
  - name: moved
    description: Moved within its API.
    execute:
      stateless_http: {url: \"{settings.base}/moved\", headers: {X-Api-Key: \"{settings.api_key}\"}}
  - name: away
    description: Moved to another host.
    execute:
      stateless_http: {url: \"{settings.base}/away\", headers: {X-Api-Key: \"{settings.api_key}\"}}
";
    let dir = config_dir(&[("host.yaml", &host), ("tool.yaml", &tool)]);
    let (code, out, err) = call_in(dir.path(), "t/api.moved");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("\"landed\": true"), "{out}");
    for path in ["/moved", "/landed"] {
        let r = received.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(r.request_line.contains(path), "{r:?}");
        assert_eq!(r.header("x-api-key"), Some(API_KEY));
    }
    let (code, out, err) = call_in(dir.path(), "t/api.away");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("HTTP 307"), "{err}");
    assert!(
        err.contains(&format!("localhost:{elsewhere}/collect")),
        "{err}"
    );
    assert!(received.recv_timeout(Duration::from_secs(5)).is_ok());
    let stolen = reached.recv_timeout(Duration::from_millis(500));
    assert!(
        stolen.is_err(),
        "the key went to another origin: {stolen:?}"
    );
}

/// A model key holding every character HTML escapes.
const MARKUP_KEY: &str = r#"sk-<&>"'-model-77c1"#;

/// The inspector's pages, which show a task's output escaped as HTML, and `agentmesh tasks`,
/// which reads the store without a host, show no secret of a task's record.
#[test]
fn the_inspector_and_the_task_list_show_no_secret_of_a_record() {
    let model = echoing_model();
    let host = format!(
        "{}models:
  fake: {{base_url: \"http://127.0.0.1:{model}/v1\", api_key: {{env: AGENTMESH_TEST_MODEL_KEY}}}}
",
        agentmesh_testkit::fixtures::API_TOKENS
    );
    let talker = "kind: commonagents.info/v1beta2/agent
namespace: t
name: talker
description: Talks to a remote model.
prompt: Talk.
model: fake/m
exposes: {said: \"output.message[0].text\"}
";
    let dir = config_dir(&[("host.yaml", &host), ("talker.yaml", talker)]);
    let data = dir.path().join("data");
    let mut env = agentmesh_testkit::fixtures::API_TOKEN_ENV.to_vec();
    env.push(("AGENTMESH_TEST_MODEL_KEY", MARKUP_KEY));
    let server = Server::start(AGENTMESH, dir.path(), &data, &env);
    let id = crate::inspector::task(&server, "admin-token", "t/talker", "go");
    let cookie = crate::inspector::session_cookie(&server, "admin-token");
    let page = server
        .request("GET", &format!("/ui/tasks/{id}"))
        .header("Cookie", &cookie)
        .send()
        .text();
    assert!(!page.contains("model-77c1"), "{page}");
    assert!(page.contains("Bearer ***"), "{page}");
    assert_eq!(server.terminate(), Some(0));
    let data = data.to_str().unwrap();
    for format in [&["--json"][..], &[]] {
        let args = [&["tasks", "--data", data][..], format].concat();
        let (code, out, err) = agentmesh_in(&Env::default(), &args);
        assert_eq!(code, Some(0), "{err}");
        assert!(!out.contains("model-77c1"), "{out}");
        assert!(out.contains("Bearer ***"), "{out}");
    }
}

/// The password of a URL's user info, which the host sends as `Authorization: Basic`, is a
/// secret whatever its setting says, and so is the base64 sent: an API echoing the header
/// shows `***`.
#[test]
fn a_password_in_a_urls_user_info_is_hidden_as_sent() {
    let port = fake_api(1);
    let host = format!(
        "kind: agentmesh/v1/host
settings: {{t: {{api: {{password: pw-in-url-3c7e, base: \"127.0.0.1:{port}\"}}}}}}
"
    );
    let tool = "kind: commonagents.info/v1beta2/tool
namespace: t
name: api
description: A REST API behind a login.
settings:
  type: object
  properties:
    password: {type: string}
    base: {type: string}
actions:
  - name: echo
    description: Answers what it was sent.
    execute: {stateless_http: {url: \"http://ops:{settings.password}@{settings.base}/echo\"}}
";
    let dir = config_dir(&[("host.yaml", &host), ("tool.yaml", tool)]);
    let (code, out, err) = call_in(dir.path(), "t/api.echo");
    assert_eq!(code, Some(0), "{out}{err}");
    // base64 of `ops:pw-in-url-3c7e`.
    assert!(!out.contains("b3BzOnB3LWluLXVybC0zYzdl"), "{out}");
    assert!(out.contains("Basic ***"), "{out}");
}

/// An error quoting the start of a long answer hides its secrets before cutting it: no head
/// of a secret is left where the cut falls.
#[test]
fn a_cut_quote_of_an_answer_leaves_no_head_of_a_secret() {
    let (port, _received) = agentmesh_testkit::serve(1, |r| {
        let auth = r.header("authorization").unwrap_or_default();
        // After `{"error":"` and the padding the key starts 5 characters before the 500th.
        let error = format!("{}{auth} and more", "x".repeat(478));
        let body = json!({"error": error}).to_string();
        ("500 Internal Server Error", body)
    });
    let dir = secrets_config(port);
    let (code, out, err) = call_in(dir.path(), "t/api.echo");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("HTTP 500"), "{err}");
    assert!(!err.contains(&API_KEY[..5]), "{err}");
}

/// The end of an MCP server's stderr, quoted when it does not start, is cut after its
/// secrets are hidden: no tail of a secret is left where the cut falls.
#[test]
fn a_cut_stderr_of_an_mcp_server_leaves_no_tail_of_a_secret() {
    // The key's line and one of 1013 bytes: of the last 1024 bytes kept, the cut falls 10
    // bytes into the key.
    let script = "printf '%s\\n' \"$KEY\" >&2; printf '%1013s\\n' end >&2; exit 3";
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: api
description: An MCP server that fails at start.
settings:
  type: object
  properties:
    api_key: {{type: string, format: password}}
mcp: {{transport: stdio, command: /bin/sh, args: [\"-c\", {script:?}], env: {{KEY: \"{{settings.api_key}}\"}}}}
actions:
  - name: go
    description: Fails.
    parameters: {{type: object, properties: {{}}}}
    execute: {{mcp: {{}}}}
"
    );
    let host = "kind: agentmesh/v1/host
settings: {t: {api: {api_key: {env: AGENTMESH_TEST_API_KEY}}}}
";
    let dir = config_dir(&[("host.yaml", host), ("tool.yaml", &tool)]);
    let (code, out, err) = call_in(dir.path(), "t/api.go");
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(err.contains("stderr ended with"), "{err}");
    assert!(!err.contains(&API_KEY[10..]), "{err}");
}

/// The inspector cuts long texts for its rows: a text stored before its secret was one (the
/// log scrubs with the secrets known when it writes) is scrubbed before it is cut, so that no
/// head of the secret is left where the cut falls (the answer's own scrub finds whole ones).
#[test]
fn the_inspector_cuts_no_head_of_a_secret_the_log_stored_before_it_was_one() {
    const LATER: &str = "zq7-later-secret-88";
    let agent = agentmesh_testkit::fixtures::scripted_agent("t/a", "");
    let files = [
        ("host.yaml", agentmesh_testkit::fixtures::API_TOKENS),
        ("agent.yaml", agent.as_str()),
        ("script.yaml", "responses:\n  - text: done\n"),
    ];
    let dir = config_dir(&files);
    let data = dir.path().join("data");
    let mut env = agentmesh_testkit::fixtures::API_TOKEN_ENV.to_vec();
    env.push(("AGENTMESH_TEST_LATER_KEY", LATER));
    let server = Server::start(AGENTMESH, dir.path(), &data, &env);
    // The row shows the first 600 characters: the cut falls 5 characters into the secret.
    let message = format!("{}{LATER} and more", "x".repeat(595));
    let id = crate::inspector::task(&server, "admin-token", "t/a", &message);
    // The secret becomes one: a model's key read from the variable holding it.
    let host = format!(
        "{}models:\n  later: {{base_url: \"http://127.0.0.1:1/v1\", api_key: {{env: AGENTMESH_TEST_LATER_KEY}}}}\n",
        agentmesh_testkit::fixtures::API_TOKENS
    );
    std::fs::write(dir.path().join("host.yaml"), host).unwrap();
    let cookie = crate::inspector::session_cookie(&server, "admin-token");
    let page = wait_for(Duration::from_secs(10), || {
        let page = server
            .request("GET", &format!("/ui/tasks/{id}"))
            .header("Cookie", &cookie)
            .send()
            .text();
        (!page.contains(LATER)).then_some(page)
    })
    .expect("the reload never made the key a secret");
    assert!(!page.contains(&LATER[..5]), "{page}");
    assert_eq!(server.terminate(), Some(0));
}
