//! Bounds that keep the host up whatever a config holds: an expression too deep to evaluate
//! without overflowing a stack is refused where it is written.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentmesh_testkit::fixtures::{dirs, scripted_agent};
use agentmesh_testkit::server::Server;
use serde_json::json;
use tempfile::TempDir;

use crate::AGENTMESH;
use crate::util::agentmesh;

#[test]
fn an_operator_chain_too_deep_to_evaluate_is_refused_at_validate_and_run() {
    // 1,000 terms: 2 KB, no brackets, and a tree 1,000 levels deep. Before the depth bound it
    // validated, and its first evaluation overflowed a worker's stack and aborted the host.
    let chain = vec!["1"; 1000].join("+");
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: sum
description: Sums.
actions:
  - name: add
    description: Add.
    execute:
      cel: {{expression: \"{chain}\"}}
"
    );
    let agent = scripted_agent(
        "t/a",
        &format!(
            "capabilities:
  sum: \"*\"
guardrails:
  before:
    - assert: \"{chain} > 0\"
"
        ),
    );
    let (_root, dir, data) = dirs(&[
        ("manifests.yaml", &format!("{tool}---\n{agent}")),
        (
            "script.yaml",
            "responses:\n  - tool_calls: [{name: sum, arguments: {}}]\n  - text: done\n",
        ),
    ]);
    let dir = dir.to_str().unwrap();
    let (code, out, err) = agentmesh(&["validate", dir]);
    assert_eq!(code, Some(1), "{out}{err}");
    let errors: Vec<&str> = out.lines().collect();
    assert_eq!(errors.len(), 2, "{out}");
    for e in &errors {
        assert!(e.contains("manifests.yaml:"), "{e}");
        assert!(e.contains("more than 100 levels deep"), "{e}");
    }
    let (code, _, err) = agentmesh(&[
        "run",
        dir,
        "--agent",
        "t/a",
        "-m",
        "go",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("levels deep"), "{err}");
}

/// A config dir whose agent `t/a` calls `t/check.all(l)` `calls` times with `l` = 0..100,
/// the action being the CEL `expression`, and a data dir beside it (see [`dirs`]).
fn list_checker(expression: &str, calls: usize) -> (TempDir, PathBuf, PathBuf) {
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: check
description: Checks.
actions:
  - name: all
    description: Check all.
    parameters:
      type: object
      properties:
        l: {{type: array, items: {{type: integer}}}}
    execute:
      cel: {{expression: \"{expression}\"}}
"
    );
    let agent = scripted_agent("t/a", "capabilities:\n  check: \"*\"\n");
    let list: Vec<u32> = (0..100).collect();
    let call = format!("  - tool_calls: [{{name: check, arguments: {{l: {list:?}}}}}]\n");
    dirs(&[
        ("manifests.yaml", &format!("{tool}---\n{agent}")),
        (
            "script.yaml",
            &format!("responses:\n{}  - text: done\n", call.repeat(calls)),
        ),
    ])
}

#[test]
fn an_expression_past_its_evaluation_budget_is_stopped_and_the_task_goes_on() {
    // Four nested `.all` over 100 elements: 10^8 iterations, 113 s a call before the budget.
    let nested =
        "input.l.all(a, input.l.all(b, input.l.all(c, input.l.all(d, a + b + c + d >= 0))))";
    let (_root, dir, data) = list_checker(nested, 1);
    let task = crate::util::run_json(&dir, "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    let log = crate::util::events(&data, &task);
    let observation = crate::util::first(&log, "ObservationEvent");
    let error = observation["result"]["error"].as_str().unwrap();
    // Stopped by its budget: the iteration count (about a quarter of a second of work), or,
    // on a machine so loaded that those iterations take longer, the wall-clock bound that
    // races it. Which one comes first depends on the machine (the iteration limit is pinned by
    // `agentmesh-expr`'s unit test `nested_comprehensions_stop_at_the_iteration_budget`).
    assert!(
        error.contains("more than 250000 macro iterations") || error.contains("ran longer than 1s"),
        "{error}"
    );
    assert!(error.ends_with("(the limit of one evaluation)"), "{error}");
}

#[test]
fn expressions_that_iterate_hold_up_no_async_worker() {
    // Each iteration compiles and runs a regex: one evaluation runs until the budget's 1 s.
    let slow = "input.l.all(a, input.l.all(b, input.l.all(c, 'aaaa'.matches('^a+$'))))";
    let (_root, dir, data) = list_checker(slow, 3);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    // Twice as many evaluations at once as the host has async workers (one per core here).
    let tasks: Vec<String> = (0..4)
        .map(|_| server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}})))
        .collect();
    // While they run (three calls of ~1 s each a task), the host answers at once; with its
    // workers held by the evaluations, it answered only between them (a second or more).
    assert_answers_at_once(&server, "expressions ran");
    assert_still_running(&server, &tasks);
}

/// Times `/healthz` 20 times, 50 ms apart: the slowest answer must come in well under the
/// time the work under way holds a thread (a second or more).
fn assert_answers_at_once(server: &Server, meanwhile: &str) {
    let slowest = (0..20)
        .map(|_| {
            let start = Instant::now();
            assert_eq!(server.request("GET", "/healthz").send().status, 200);
            let took = start.elapsed();
            std::thread::sleep(Duration::from_millis(50));
            took
        })
        .max()
        .unwrap();
    assert!(
        slowest < Duration::from_millis(500),
        "/healthz took {slowest:?} while {meanwhile}"
    );
}

/// The turns of `tasks` were still running while the host was timed: a task logs its first
/// observation when its first call ends.
fn assert_still_running(server: &Server, tasks: &[String]) {
    let finished = tasks
        .iter()
        .filter(|id| {
            let log = server
                .request("GET", &format!("/v1/tasks/{id}/events"))
                .send()
                .json();
            log.to_string().contains("ObservationEvent")
        })
        .count();
    assert!(
        finished < tasks.len(),
        "the turns ended before /healthz was timed: {}",
        server
            .request("GET", &format!("/v1/tasks/{}/events", tasks[0]))
            .send()
            .json()
    );
}

/// `tasks` tasks at once each call a guest that never returns (stopped at its 3 s timeout), in
/// an instance pool of `tasks`: every instance loops. Before guests left the async workers,
/// two of them (one per core here) froze the host until their timeout: `/healthz` took 9.8 s.
fn looping_guests_hold_up_no_async_worker(tasks: usize) {
    let dir = crate::wasm::spinning_agent(&format!(
        "kind: agentmesh/v1/host\npolicy: {{max_instances: {tasks}}}\n"
    ));
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(AGENTMESH, dir.path(), data.path(), &[]);
    let ids: Vec<String> = (0..tasks)
        .map(|_| server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}})))
        .collect();
    assert_answers_at_once(&server, "guests looped");
    assert_still_running(&server, &ids);
    // Each call ends at its timeout as an error the LLM sees, and the task goes on.
    for id in &ids {
        let observation = server.wait_for_event(id, "ObservationEvent");
        let error = observation["result"]["error"].as_str().unwrap_or_default();
        assert!(error.contains("timeout"), "{observation}");
    }
}

#[test]
fn two_looping_guests_hold_up_no_async_worker() {
    looping_guests_hold_up_no_async_worker(2);
}

#[test]
fn four_looping_guests_hold_up_no_async_worker() {
    looping_guests_hold_up_no_async_worker(4);
}
