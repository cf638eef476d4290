//! The command-line reads of tasks: `agentmesh tasks` and `agentmesh events` on a store no host
//! serves (`--data`) and on a running host through its API (`--server`, the token in
//! `AGENTMESH_TOKEN`), and `agentmesh review approve|deny` through the API.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use agentmesh_testkit::fixtures::{
    self, API_TOKEN_ENV, API_TOKENS, echo_tool, reviewed_agent, scripted_agent,
};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::{Env, agentmesh_in, run_in};

/// `lab/careful` calls `echo` once a review by `user:ops` approves it, then answers `Echoed.`;
/// `lab/plain` answers `Plain.`. With `host`, the host config.
fn config(host: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let careful = reviewed_agent("lab/careful", "careful.yaml");
    let plain = scripted_agent("lab/plain", "").replace("script.yaml", "plain.yaml");
    let manifests = format!("{}---\n{careful}---\n{plain}---\n{host}", echo_tool("lab"));
    fixtures::dirs(&[
        ("manifests.yaml", &manifests),
        (
            "careful.yaml",
            "responses:\n  - tool_calls: [{name: echo, arguments: {text: hi}}]\n  - text: Echoed.\n",
        ),
        (
            "plain.yaml",
            "responses:\n  - text: Plain.\n  - text: Plain again.\n",
        ),
    ])
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("`{l}`: {e}")))
        .collect()
}

#[test]
fn tasks_lists_a_stores_tasks_newest_first_with_their_filters() {
    let (root, dir, data) = config("");
    let env = Env::default();
    for agent in ["lab/plain", "lab/plain"] {
        let (code, _, stderr) = run_in(&env, &dir, agent, "hello", &data, &[]);
        assert_eq!(code, Some(0), "{stderr}");
    }
    let data_arg = data.to_str().unwrap();
    let (code, stdout, stderr) = agentmesh_in(&env, &["tasks", "--data", data_arg, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let tasks = json_lines(&stdout);
    assert_eq!(tasks.len(), 2, "{stdout}");
    assert!(
        tasks[0]["created_at"].as_str() >= tasks[1]["created_at"].as_str(),
        "not newest first: {stdout}"
    );
    assert_eq!(tasks[0]["output"][0]["message"][0]["text"], "Plain.");
    assert_eq!(tasks[0]["queue_depth"], 0);

    // The table: a header and a row a task, with its last answer.
    let (code, table, _) = agentmesh_in(&env, &["tasks", "--data", data_arg]);
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATUS"),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");
    let newest = tasks[0]["id"].as_str().unwrap();
    assert!(
        lines[1].starts_with(newest) && lines[1].contains("idle"),
        "{table}"
    );
    assert!(lines[1].ends_with("Plain."), "{table}");

    // Filters and the limit.
    let count = |args: &[&str]| {
        let mut all = vec!["tasks", "--data", data_arg, "--json"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = agentmesh_in(&env, &all);
        assert_eq!(code, Some(0), "{stderr}");
        json_lines(&stdout).len()
    };
    assert_eq!(count(&["--agent", "lab/careful"]), 0);
    assert_eq!(count(&["--agent", "lab/plain", "--status", "idle"]), 2);
    assert_eq!(count(&["--status", "terminated"]), 0);
    assert_eq!(count(&["--owner", "nobody"]), 0);
    assert_eq!(count(&["--limit", "1"]), 1);
    let (code, _, stderr) = agentmesh_in(&env, &["tasks", "--data", data_arg, "--status", "busy"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("unknown status `busy`"), "{stderr}");

    // Without `--data`: the current directory's `.agentmesh`, as `run` there uses.
    let (code, _, stderr) = agentmesh_in(
        &Env {
            cwd: Some(root.path()),
            ..Env::default()
        },
        &["tasks"],
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no store in .agentmesh"), "{stderr}");
}

#[test]
fn tasks_events_and_reviews_go_through_a_running_hosts_api() {
    let (_root, dir, data) = config(API_TOKENS);
    let server = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
    let url = format!("http://{}", server.addr);
    let r = server
        .request("POST", "/v1/tasks")
        .header("Authorization", "Bearer admin-token")
        .json(&json!({"agent": "lab/careful", "input": {"message": "echo hi"}}))
        .send();
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let admin = [("AGENTMESH_TOKEN", "admin-token")];
    let as_admin = Env {
        vars: &admin,
        ..Env::default()
    };

    // No token: the host's refusal, with what to set.
    let (code, _, stderr) = agentmesh_in(&Env::default(), &["tasks", "--server", &url]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("401") && stderr.contains("AGENTMESH_TOKEN"),
        "{stderr}"
    );

    // Follow the task's events while it waits in review, is approved and then deleted.
    let mut follow = Command::new(AGENTMESH)
        .args(["events", "--server", &url, &id, "--follow"])
        .envs(admin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut next_of_kind = |kind: &str| -> Value {
        for line in lines.by_ref() {
            let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
            if event["kind"] == kind {
                return event;
            }
        }
        panic!("the followed stream ended before a {kind}");
    };
    let review = next_of_kind("ReviewRequestEvent")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let (code, stdout, stderr) = agentmesh_in(&as_admin, &["tasks", "--server", &url, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let listed = json_lines(&stdout);
    assert_eq!(listed.len(), 1, "{stdout}");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["status"], "waiting");

    // `user:ops` is the reviewer the expression names.
    let ops = [("AGENTMESH_TOKEN", "ops-token")];
    let (code, stdout, stderr) = agentmesh_in(
        &Env {
            vars: &ops,
            ..Env::default()
        },
        &["review", "approve", &id, &review, "--server", &url],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap()["approve"],
        true
    );
    assert_eq!(
        next_of_kind("ObservationEvent")["result"],
        json!({"said": "hi"})
    );
    assert_eq!(
        next_of_kind("MessageEvent")["content"][0]["text"],
        "Echoed."
    );
    // Deciding again: the host's 404, as an error.
    let (code, _, stderr) = agentmesh_in(
        &Env {
            vars: &ops,
            ..Env::default()
        },
        &["review", "deny", &id, &review, "--server", &url],
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("404"), "{stderr}");

    // The whole log, not followed.
    let (code, stdout, _) = agentmesh_in(&as_admin, &["events", "--server", &url, &id]);
    assert_eq!(code, Some(0));
    let log = json_lines(&stdout);
    assert_eq!(log[0]["seq"], 1);
    assert!(
        log.iter().any(|e| e["kind"] == "ReviewDecisionEvent"),
        "{stdout}"
    );

    // Following ends when the task ends.
    let r = server
        .request("DELETE", &format!("/v1/tasks/{id}"))
        .header("Authorization", "Bearer admin-token")
        .send();
    assert_eq!(r.status, 204, "{}", r.text());
    let ended = wait_for(Duration::from_secs(30), || follow.try_wait().unwrap());
    let Some(status) = ended else {
        let _ = follow.kill();
        panic!("`events --follow` did not stop when the task terminated");
    };
    assert!(status.success());
}
