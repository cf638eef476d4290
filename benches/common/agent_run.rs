//! One `agentmesh run` of a turn of scripted steps, each one call, and the event log it
//! leaves: what the benches that time steps share (`mcp`, `long_turn`). Not in `common`
//! itself, whose every item each bench uses.

use std::path::Path;
use std::process::Command;

use agentmesh_testkit::fixtures::{self, scripted_agent};
use serde_json::Value;

use crate::common::QUIET;

/// The tool `client/constant`: one action, `ok`, a CEL expression returning a constant.
pub const CONSTANT_TOOL: &str = "kind: commonagents.info/v1beta2/tool
namespace: client
name: constant
description: Returns a constant.
actions:
  - name: ok
    description: Returns a constant.
    execute: {cel: {expression: \"'still alive'\"}}
";

/// Writes into `dir` the tool `tool` (a manifest) and the agent `agent`, whose one capability
/// is `capability`, on a script that calls `function` (no arguments) once a step for `steps`
/// steps, then answers.
pub fn config(dir: &Path, agent: &str, tool: &str, capability: &str, function: &str, steps: usize) {
    let limit = steps + 10;
    let agent = scripted_agent(
        agent,
        &format!(
            "limits: {{max_turns: {limit}, max_tool_calls: {limit}}}\ncapabilities:\n  {capability}: \"*\"\n"
        ),
    );
    let mut script = String::from("responses:\n");
    for _ in 0..steps {
        script.push_str(&format!(
            "  - tool_calls: [{{name: {function}, arguments: {{}}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    fixtures::write(
        dir,
        &[
            ("tool.yaml", tool),
            ("agent.yaml", &agent),
            ("script.yaml", &script),
        ],
    );
}

/// Runs `agent` of `dir` to its end with `agentmesh` (a binary) on the data dir `data`, and
/// reads its task's events back with the same binary.
pub fn events(agentmesh: &str, dir: &Path, agent: &str, data: &Path) -> Vec<Value> {
    let run = Command::new(agentmesh)
        .args(["run", dir.to_str().unwrap(), "--agent", agent, "-m", "go"])
        .args(["--data", data.to_str().unwrap(), "--json"])
        .env(QUIET.0, QUIET.1)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let task: Value = serde_json::from_slice(&run.stdout).unwrap();
    let log = Command::new(agentmesh)
        .args(["events", "--data", data.to_str().unwrap()])
        .arg(task["id"].as_str().unwrap())
        .output()
        .unwrap();
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// When each event of `kind` was logged, in microseconds since the epoch (the timestamps
/// have millisecond resolution).
pub fn times(events: &[Value], kind: &str) -> Vec<i64> {
    events
        .iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| {
            let stamp = e["timestamp"].as_str().unwrap();
            chrono::DateTime::parse_from_rfc3339(stamp)
                .unwrap()
                .timestamp_micros()
        })
        .collect()
}
