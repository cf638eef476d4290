//! The `kubernetes_job` runtime against a stand-in Kubernetes API (`agentmesh_testkit::kubernetes`):
//! a Job per call from the action's template, its pod's log and exit code as the result, the
//! Job deleted afterwards (propagation: background), on a timeout and on an interrupt; what
//! the API does wrong is an observation.

use std::time::Duration;

use agentmesh_testkit::fixtures::{config_dir, scripted_agent};
use agentmesh_testkit::kubernetes::{Cluster, Run};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::{Env, agentmesh_in, run_in};

/// The API token, read from the environment into a `format: password` setting.
const TOKEN: &str = "k8s-tok-93be1f07c2";
const ENV: [(&str, &str); 1] = [("AGENTMESH_TEST_K8S_TOKEN", TOKEN)];

/// A config dir: a tool `t/k8s` whose action `run` runs a suite as a Job in namespace
/// `namespace` (a template) of the API at `api` (with `extra` lines in its block), and an
/// agent `t/a` making `calls` (JSON argument objects) then answering `done`.
fn config(api: &str, namespace: &str, extra: &str, calls: &[Value]) -> tempfile::TempDir {
    let host = format!(
        "kind: agentmesh/v1/host
settings:
  t:
    k8s:
      api: \"{api}\"
      token: {{env: AGENTMESH_TEST_K8S_TOKEN}}
"
    );
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: k8s
description: Runs test suites in the cluster.
settings:
  type: object
  properties:
    api: {{type: string}}
    token: {{type: string, format: password}}
actions:
  - name: run
    description: Runs a suite.
    parameters:
      type: object
      properties:
        suite: {{type: string}}
        ns: {{type: string, default: ci}}
    execute:
      kubernetes_job:
        namespace: \"{namespace}\"
        api_server: \"{{settings.api}}\"
        token: \"{{settings.token}}\"
{extra}        spec:
          template:
            spec:
              containers:
                - name: tests
                  image: alpine:3
                  command: [sh, -c, \"run-suite {{parameters.suite}}\"]
"
    );
    let mut script = String::from("responses:\n");
    for args in calls {
        script.push_str(&format!(
            "  - tool_calls: [{{name: k8s, arguments: {args}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    config_dir(&[
        ("host.yaml", &host),
        ("tool.yaml", &tool),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities: {k8s: \"*\"}\n"),
        ),
        ("script.yaml", &script),
    ])
}

/// Runs agent `t/a` of `dir` to the end: the task's events (as `agentmesh events` prints
/// them, one a line) and the observations in order.
fn run(dir: &tempfile::TempDir) -> (String, Vec<Value>) {
    let env = Env {
        vars: &ENV,
        ..Env::default()
    };
    let data = dir.path().join("data");
    let (code, out, err) = run_in(&env, dir.path(), "t/a", "go", &data, &["--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let task: Value = serde_json::from_str(&out).unwrap();
    let id = task["id"].as_str().unwrap();
    let (code, log, err) = agentmesh_in(&env, &["events", "--data", data.to_str().unwrap(), id]);
    assert_eq!(code, Some(0), "{err}");
    let observations = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "ObservationEvent")
        .map(|e| e["result"].clone())
        .collect();
    (log, observations)
}

/// `agentmesh validate` of `dir`, with the token in the environment.
fn validate(dir: &tempfile::TempDir) -> (Option<i32>, String, String) {
    let env = Env {
        vars: &ENV,
        ..Env::default()
    };
    agentmesh_in(&env, &["validate", dir.path().to_str().unwrap()])
}

/// The shell line of a Job's one container, as the host sent it.
fn command_of(job: &Value) -> String {
    job.pointer("/spec/template/spec/containers/0/command/2")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn each_call_runs_a_job_returns_its_log_and_exit_code_and_deletes_it() {
    // The pod prints the line it was given; the `unit` suite passes, `e2e` fails with 3.
    let cluster = Cluster::start(TOKEN, |job| {
        let line = command_of(job);
        let code = if line.ends_with("unit") { 0 } else { 3 };
        Run::exits(code, &format!("{line}\nok\n"), Duration::from_millis(300))
    });
    let dir = config(
        &cluster.url(),
        "ci",
        "",
        &[json!({"suite": "unit"}), json!({"suite": "e2e"})],
    );
    let (code, out, err) = validate(&dir);
    assert_eq!(code, Some(0), "{out}{err}");

    let (log, obs) = run(&dir);
    assert_eq!(
        obs[0],
        json!({"job": "agentmesh-00001", "namespace": "ci", "status": "succeeded", "exit_code": 0,
               "log": "run-suite unit\nok\n", "log_truncated": false}),
        "{obs:?}"
    );
    assert_eq!(obs[1]["status"], "failed", "{obs:?}");
    assert_eq!(obs[1]["exit_code"], 3, "{obs:?}");
    assert_eq!(obs[1]["log"], "run-suite e2e\nok\n", "{obs:?}");

    let jobs = cluster.jobs();
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        assert_eq!(job.namespace, "ci");
        // A call runs once: no retries, no restarts, unless the spec says so.
        assert_eq!(job.sent["spec"]["backoffLimit"], 0, "{}", job.sent);
        assert_eq!(
            job.sent["spec"]["template"]["spec"]["restartPolicy"],
            "Never"
        );
        assert_eq!(job.sent["metadata"]["generateName"], "agentmesh-");
        assert_eq!(job.deleted.as_deref(), Some("Background"), "{}", job.name);
    }
    assert!(!log.contains(TOKEN), "the event log shows the API token");
}

#[test]
fn a_job_that_does_not_end_in_time_is_deleted_and_the_llm_is_told() {
    let cluster = Cluster::start(TOKEN, |_| Run::forever());
    let dir = config(
        &cluster.url(),
        "ci",
        "        timeout: 1s\n",
        &[json!({"suite": "slow"})],
    );
    let (_log, obs) = run(&dir);
    let error = obs[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the Job `agentmesh-00001` did not end within 1s; it was deleted"),
        "{obs:?}"
    );
    let jobs = cluster.jobs();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].deleted.as_deref(), Some("Background"));
}

#[test]
fn a_log_longer_than_max_output_is_cut() {
    let cluster = Cluster::start(TOKEN, |_| Run::exits(0, &"x".repeat(5000), Duration::ZERO));
    let dir = config(
        &cluster.url(),
        "ci",
        "        max_output: 1KiB\n",
        &[json!({"suite": "loud"})],
    );
    let (_log, obs) = run(&dir);
    assert_eq!(obs[0]["log"], "x".repeat(1024), "{obs:?}");
    assert_eq!(obs[0]["log_truncated"], true);
}

/// Runs a job that prints `printed` under `max_output: 1KiB`: the host's log and the kept
/// part of the job's log, checked for the head of [`TOKEN`] and to be cut.
fn run_leaky(printed: String) -> String {
    let cluster = Cluster::start(TOKEN, move |_| Run::exits(0, &printed, Duration::ZERO));
    let dir = config(
        &cluster.url(),
        "ci",
        "        max_output: 1KiB\n",
        &[json!({"suite": "leaky"})],
    );
    let (log, obs) = run(&dir);
    let kept = obs[0]["log"].as_str().unwrap_or_default();
    assert!(
        !log.contains(&TOKEN[..4]),
        "the token's head is in the log: {kept}"
    );
    assert_eq!(obs[0]["log_truncated"], true);
    kept.to_owned()
}

/// A secret where the log is cut is hidden whole, not cut to a head that stays.
#[test]
fn a_secret_across_the_cut_of_a_log_is_hidden_whole() {
    let kept = run_leaky(format!("{}{TOKEN} and more", "x".repeat(1020)));
    assert!(
        kept.starts_with(&format!("{}***", "x".repeat(1020))),
        "{kept}"
    );
}

/// A secret hidden early in a cut log draws later text in: the cut stays where the log was
/// cut, so the head of a secret just past it does not move into what is kept.
#[test]
fn a_secret_hidden_early_draws_no_later_secrets_head_into_a_cut_log() {
    // The second token begins 2 bytes past the 1 KiB cut.
    let kept = run_leaky(format!(
        "{TOKEN}{}{TOKEN} and more",
        "x".repeat(1026 - TOKEN.len())
    ));
    assert_eq!(kept, format!("***{}", "x".repeat(1024 - TOKEN.len())));
}

#[test]
fn an_unreachable_or_refusing_api_and_a_bad_namespace_are_observations() {
    // Nobody listens on port 1.
    let dir = config("http://127.0.0.1:1", "ci", "", &[json!({"suite": "unit"})]);
    let (_log, obs) = run(&dir);
    let error = obs[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("is unreachable"), "{obs:?}");

    // A cluster that takes another token refuses.
    let cluster = Cluster::start("another-token", |_| Run::forever());
    let dir = config(&cluster.url(), "ci", "", &[json!({"suite": "unit"})]);
    let (log, obs) = run(&dir);
    let error = obs[0]["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("creating the Job: HTTP 401"), "{obs:?}");
    assert!(!log.contains(TOKEN), "the event log shows the API token");
    assert!(cluster.jobs().is_empty());

    // The namespace comes from the LLM here: one that is no DNS label never reaches a path.
    let cluster = Cluster::start(TOKEN, |_| Run::exits(0, "", Duration::ZERO));
    let dir = config(
        &cluster.url(),
        "{parameters.ns}",
        "",
        &[
            json!({"suite": "unit", "ns": "../../api/v1/secrets"}),
            json!({"suite": "unit", "ns": "qa"}),
        ],
    );
    let (_log, obs) = run(&dir);
    let error = obs[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("`../../api/v1/secrets` is not a Kubernetes namespace name"),
        "{obs:?}"
    );
    assert_eq!(obs[1]["namespace"], "qa", "{obs:?}");
    let requests = cluster.requests();
    assert!(
        requests.iter().all(|r| !r.contains("secrets")),
        "{requests:?}"
    );
    assert_eq!(cluster.jobs().len(), 1);
}

#[test]
fn without_an_api_server_outside_a_cluster_the_task_ends_saying_why() {
    let dir = config("unused", "ci", "", &[json!({"suite": "unit"})]);
    let tool = std::fs::read_to_string(dir.path().join("tool.yaml")).unwrap();
    let tool = tool
        .replace("        api_server: \"{settings.api}\"\n", "")
        .replace("        token: \"{settings.token}\"\n", "");
    std::fs::write(dir.path().join("tool.yaml"), tool).unwrap();
    let data = dir.path().join("data");
    let env = Env {
        vars: &ENV,
        ..Env::default()
    };
    let (code, out, err) = run_in(&env, dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("this host does not run in a Kubernetes cluster"),
        "{out}{err}"
    );
}

#[test]
fn an_interrupt_deletes_the_running_job() {
    let cluster = Cluster::start(TOKEN, |_| Run::forever());
    let dir = config(&cluster.url(), "ci", "", &[json!({"suite": "long"})]);
    let data = dir.path().join("data");
    let server = Server::start(AGENTMESH, dir.path(), &data, &ENV);
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    wait_for(Duration::from_secs(30), || {
        (!cluster.jobs().is_empty()).then_some(())
    })
    .expect("the call created its Job");
    let r = server
        .request("POST", &format!("/v1/tasks/{id}/interrupt"))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    let observation = server.wait_for_event(&id, "ObservationEvent");
    let error = observation["result"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("interrupted: the Job `agentmesh-00001` was deleted before it ended"),
        "{observation}"
    );
    assert_eq!(cluster.jobs()[0].deleted.as_deref(), Some("Background"));
    assert_eq!(server.terminate(), Some(0));
}

#[test]
fn validate_checks_the_job_block() {
    let dir = config("http://127.0.0.1:1", "ci", "", &[]);
    let tool = std::fs::read_to_string(dir.path().join("tool.yaml")).unwrap();
    // The API from a parameter (the LLM could send the Job and the token elsewhere), and a
    // spec that is a whole Job rather than a Job's spec.
    let tool = tool
        .replace("\"{settings.api}\"", "\"{parameters.ns}\"")
        .replace(
            "          template:\n",
            "          job:\n            template:\n",
        );
    std::fs::write(dir.path().join("tool.yaml"), tool).unwrap();
    let (code, out, err) = validate(&dir);
    assert_eq!(code, Some(1), "{out}{err}");
    let said = format!("{out}{err}");
    for expected in [
        "tool.yaml:21:23: error: `parameters` is not available in a `kubernetes_job` `api_server` or `token` (available: settings)",
        "tool.yaml:24:11: error: action `run`: `kubernetes_job.spec` is a Job's `spec`: it needs `template.spec.containers` with at least one container",
    ] {
        assert!(said.contains(expected), "missing `{expected}` in:\n{said}");
    }
}
