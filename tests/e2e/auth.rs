//! Auth providers of the host config in request templates: `{auth.<provider>()}` is the
//! `Authorization` header value of a `bearer` token or of an OAuth 2.0 client-credentials
//! token (fetched from a stand-in token endpoint, cached, fetched again once expired); the
//! tokens and credentials never show in the event log or the stored task; a failing token
//! endpoint is an observation; a provider the host config does not name is a `validate` error.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentmesh_testkit::fixtures::{config_dir, scripted_agent};
use serde_json::{Value, json};

use crate::util::{Env, agentmesh, agentmesh_in, observations, run_in};

const GH_TOKEN: &str = "ghp-test-token-5d1c2b";
const CLIENT_SECRET: &str = "crm-client-secret-93ab";
const ACCESS_1: &str = "crm-access-one-7e21";
const ACCESS_2: &str = "crm-access-two-4f08";

/// A stand-in API answering `requests` requests with the `authorization` header it got.
fn echo_api(requests: usize) -> (u16, std::sync::mpsc::Receiver<agentmesh_testkit::Request>) {
    agentmesh_testkit::serve(requests, |r| {
        let auth = r.header("authorization").unwrap_or_default().to_owned();
        ("200 OK", json!({"you_sent": auth}).to_string())
    })
}

/// A config dir: `host` as the host config, a tool `t/api` whose action `get` sends
/// `Authorization: {header}` to the API at `port`, and an agent `t/a` calling it `calls` times.
fn auth_config(host: &str, port: u16, header: &str, calls: usize) -> tempfile::TempDir {
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: api
description: An API behind a token.
actions:
  - name: get
    description: Reads.
    execute:
      stateless_http:
        url: \"http://127.0.0.1:{port}/me\"
        headers: {{Authorization: \"{header}\"}}
"
    );
    let mut script = String::from("responses:\n");
    for _ in 0..calls {
        script.push_str("  - tool_calls: [{name: api, arguments: {}}]\n");
    }
    script.push_str("  - text: done\n");
    config_dir(&[
        ("host.yaml", host),
        ("tool.yaml", &tool),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities: {api: \"*\"}\n"),
        ),
        ("script.yaml", &script),
    ])
}

/// Runs `t/a` in `dir` with `vars`: the task object, and the event log as text.
fn run_with(dir: &std::path::Path, vars: &[(&str, &str)]) -> (Value, String) {
    let env = Env {
        vars,
        ..Env::default()
    };
    let data = dir.join("data");
    let (code, out, err) = run_in(&env, dir, "t/a", "go", &data, &["--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let task: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{err}"));
    let (code, log, err) = agentmesh_in(
        &env,
        &[
            "events",
            "--data",
            data.to_str().unwrap(),
            task["id"].as_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    (task, log)
}

fn events_of(log: &str) -> Vec<Value> {
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_bearer_provider_gives_the_header_value_and_its_token_never_shows() {
    let (port, received) = echo_api(1);
    let host = "kind: agentmesh/v1/host
auth:
  github: {type: bearer, token: {env: AGENTMESH_TEST_GH_TOKEN}}
";
    let dir = auth_config(host, port, "{auth.github()}", 1);
    let vars = [("AGENTMESH_TEST_GH_TOKEN", GH_TOKEN)];
    let (task, log) = run_with(dir.path(), &vars);
    let request = received.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {GH_TOKEN}").as_str())
    );
    // The API echoed the token: the observation shows `***` where it was.
    let obs = observations(&events_of(&log));
    assert_eq!(obs, [json!({"you_sent": "Bearer ***"})]);
    assert!(
        !log.contains(GH_TOKEN),
        "the event log shows the token:\n{log}"
    );
    assert!(
        !task.to_string().contains(GH_TOKEN),
        "the stored task shows the token: {task}"
    );
}

#[test]
fn an_oauth2_token_is_fetched_once_reused_and_fetched_again_when_it_expires() {
    // The first token expires at once; the second lives an hour.
    let issued = AtomicUsize::new(0);
    let (token_port, token_requests) = agentmesh_testkit::serve(2, move |_| {
        let answer = match issued.fetch_add(1, Ordering::SeqCst) {
            0 => json!({"access_token": ACCESS_1, "token_type": "Bearer", "expires_in": 0}),
            _ => json!({"access_token": ACCESS_2, "token_type": "bearer", "expires_in": 3600}),
        };
        ("200 OK", answer.to_string())
    });
    let (port, received) = echo_api(3);
    let host = format!(
        "kind: agentmesh/v1/host
auth:
  crm:
    type: oauth2_client_credentials
    token_url: http://127.0.0.1:{token_port}/oauth/token
    client_id: crm-client
    client_secret: {{env: AGENTMESH_TEST_CRM_SECRET}}
    scopes: [read, write]
"
    );
    let dir = auth_config(&host, port, "{auth.crm()}", 3);
    let vars = [("AGENTMESH_TEST_CRM_SECRET", CLIENT_SECRET)];
    let (task, log) = run_with(dir.path(), &vars);

    let sent: Vec<String> = (0..3)
        .map(|_| {
            let r = received.recv_timeout(Duration::from_secs(10)).unwrap();
            r.header("authorization").unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(
        sent,
        [
            format!("Bearer {ACCESS_1}"),
            format!("Bearer {ACCESS_2}"),
            format!("Bearer {ACCESS_2}")
        ]
    );
    let fetch = token_requests
        .recv_timeout(Duration::from_secs(10))
        .unwrap();
    assert_eq!(fetch.request_line, "POST /oauth/token HTTP/1.1");
    assert_eq!(fetch.body, "grant_type=client_credentials&scope=read+write");
    assert!(
        fetch
            .header("authorization")
            .is_some_and(|a| a.starts_with("Basic ")),
        "{fetch:?}"
    );
    assert!(token_requests.recv_timeout(Duration::from_secs(10)).is_ok());
    // Two fetches for three calls: the second token was reused.
    assert!(token_requests.try_recv().is_err());
    for secret in [ACCESS_1, ACCESS_2, CLIENT_SECRET] {
        assert!(
            !log.contains(secret),
            "the event log shows `{secret}`:\n{log}"
        );
        assert!(
            !task.to_string().contains(secret),
            "the task shows `{secret}`"
        );
    }
    let obs = observations(&events_of(&log));
    assert_eq!(obs[2], json!({"you_sent": "Bearer ***"}));
}

#[test]
fn a_failing_token_endpoint_is_an_observation_and_the_task_goes_on() {
    let (token_port, _requests) = agentmesh_testkit::serve(1, |_| {
        (
            "500 Internal Server Error",
            json!({"error": "server_error", "echo": CLIENT_SECRET}).to_string(),
        )
    });
    let host = format!(
        "kind: agentmesh/v1/host
auth:
  crm: {{type: oauth2_client_credentials, token_url: \"http://127.0.0.1:{token_port}/token\",
        client_id: crm-client, client_secret: {{env: AGENTMESH_TEST_CRM_SECRET}}}}
"
    );
    // Nothing listens on port 1: the request is never made without a token anyway.
    let dir = auth_config(&host, 1, "{auth.crm()}", 1);
    let vars = [("AGENTMESH_TEST_CRM_SECRET", CLIENT_SECRET)];
    let (task, log) = run_with(dir.path(), &vars);
    assert_eq!(task["status"], "idle");
    let obs = observations(&events_of(&log));
    let error = obs[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("auth provider `crm`")
            && error.contains("HTTP 500")
            && error.contains("server_error"),
        "{obs:?}"
    );
    assert!(!log.contains(CLIENT_SECRET), "{log}");
}

#[test]
fn validate_refuses_an_unknown_provider_and_a_provider_without_its_credentials() {
    let host = "kind: agentmesh/v1/host
auth:
  github: {type: bearer}
  crm: {type: oauth2_client_credentials, token_url: ftp://id.example.com/token, client_id: a,
        client_secret: b, token: c}
  empty: {type: bearer, token: \"\"}
";
    let dir = auth_config(host, 9, "{auth.gihtub()}", 0);
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    for expected in [
        "tool.yaml:11:",
        "unknown auth provider `gihtub`: the host config's `auth` does not name it; did you mean `github`?",
        "host.yaml:3:",
        "auth provider `github` of type `bearer` needs `token`",
        "`token_url` must be an http:// or https:// URL",
        "auth provider `crm`: `token` is not a field of type `oauth2_client_credentials`",
        "host.yaml:6:32: error: auth provider `empty`: `token` must be a non-empty string",
    ] {
        assert!(out.contains(expected), "no `{expected}` in:\n{out}{err}");
    }
}
