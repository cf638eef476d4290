//! Bounds that keep the host up whatever a config holds: an expression too deep to evaluate
//! without overflowing a stack is refused where it is written.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::server::Server;
use crate::util::agentmesh;

#[test]
fn an_operator_chain_too_deep_to_evaluate_is_refused_at_validate_and_run() {
    // 1,000 terms: 2 KB, no brackets, and a tree 1,000 levels deep. Before the depth bound it
    // validated, and its first evaluation overflowed a worker's stack and aborted the host.
    let chain = vec!["1"; 1000].join("+");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifests.yaml"),
        format!(
            "kind: commonagents.info/v1beta2/tool
namespace: t
name: sum
description: Sums.
actions:
  - name: add
    description: Add.
    execute:
      cel: {{expression: \"{chain}\"}}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Test agent.
prompt: Help.
model: scripted/script.yaml
capabilities:
  sum: \"*\"
guardrails:
  before:
    - assert: \"{chain} > 0\"
"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "responses:\n  - tool_calls: [{name: sum, arguments: {}}]\n  - text: done\n",
    )
    .unwrap();
    let dir = dir.to_str().unwrap();
    let (code, out, err) = agentmesh(&["validate", dir]);
    assert_eq!(code, Some(1), "{out}{err}");
    let errors: Vec<&str> = out.lines().collect();
    assert_eq!(errors.len(), 2, "{out}");
    for e in &errors {
        assert!(e.contains("manifests.yaml:"), "{e}");
        assert!(e.contains("more than 100 levels deep"), "{e}");
    }
    let data = root.path().join("data");
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
/// the action being the CEL `expression`; returns the temp root and the config dir.
fn list_checker(expression: &str, calls: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifests.yaml"),
        format!(
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
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Test agent.
prompt: Help.
model: scripted/script.yaml
capabilities:
  check: \"*\"
"
        ),
    )
    .unwrap();
    let list: Vec<u32> = (0..100).collect();
    let call = format!("  - tool_calls: [{{name: check, arguments: {{l: {list:?}}}}}]\n");
    std::fs::write(
        dir.join("script.yaml"),
        format!("responses:\n{}  - text: done\n", call.repeat(calls)),
    )
    .unwrap();
    (root, dir)
}

#[test]
fn an_expression_past_its_evaluation_budget_is_stopped_and_the_task_goes_on() {
    // Four nested `.all` over 100 elements: 10^8 iterations, 113 s a call before the budget.
    let nested =
        "input.l.all(a, input.l.all(b, input.l.all(c, input.l.all(d, a + b + c + d >= 0))))";
    let (root, dir) = list_checker(nested, 1);
    let data = root.path().join("data");
    let task = crate::util::run_json(&dir, "t/a", "go", &data, &[]);
    assert_eq!(task["status"], "idle");
    let log = crate::util::events(&data, &task);
    let observation = crate::util::first(&log, "ObservationEvent");
    let error = observation["result"]["error"].as_str().unwrap();
    assert!(
        error.contains("more than 250000 macro iterations"),
        "{error}"
    );
}

#[test]
fn expressions_that_iterate_hold_up_no_async_worker() {
    // Each iteration compiles and runs a regex: one evaluation runs until the budget's 1 s.
    let slow = "input.l.all(a, input.l.all(b, input.l.all(c, 'aaaa'.matches('^a+$'))))";
    let (root, dir) = list_checker(slow, 3);
    let server = Server::start(&dir, &root.path().join("data"), &[]);
    // Twice as many evaluations at once as the host has async workers (one per core here).
    let tasks: Vec<String> = (0..4)
        .map(|_| server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}})))
        .collect();
    // While they run (three calls of ~1 s each a task), the host answers at once; with its
    // workers held by the evaluations, it answered only between them (a second or more).
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
        "/healthz took {slowest:?} while expressions ran"
    );
    // The turns were still running meanwhile: a task logs its turn when the turn ends.
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
        "the turns ended before /healthz was timed"
    );
}
