//! Running the binary and reading what it prints.

use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentmesh_testkit::server::Server;
use serde_json::Value;

use crate::AGENTMESH;

/// Runs `agentmesh ARGS`: exit code, stdout, stderr.
pub fn agentmesh(args: &[&str]) -> (Option<i32>, String, String) {
    agentmesh_in(&Env::default(), args)
}

/// Where `agentmesh` runs: its working directory (`None`: this process's) and extra
/// environment variables.
#[derive(Default)]
pub struct Env<'a> {
    /// The working directory.
    pub cwd: Option<&'a Path>,
    /// Extra environment variables.
    pub vars: &'a [(&'a str, &'a str)],
}

/// Runs `agentmesh ARGS` in `env`: exit code, stdout, stderr.
pub fn agentmesh_in(env: &Env, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = Command::new(AGENTMESH);
    if let Some(cwd) = env.cwd {
        command.current_dir(cwd);
    }
    command.envs(env.vars.iter().copied());
    let out = command
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run agentmesh: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `agentmesh run DIR --agent AGENT -m MESSAGE --data DATA [EXTRA…]` in `env`: exit code,
/// stdout, stderr.
pub fn run_in(
    env: &Env,
    dir: &Path,
    agent: &str,
    message: &str,
    data: &Path,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let mut args = vec![
        "run",
        dir.to_str().unwrap(),
        "--agent",
        agent,
        "-m",
        message,
        "--data",
        data.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    agentmesh_in(env, &args)
}

/// `agentmesh run DIR --agent AGENT -m MESSAGE --data DATA --json [EXTRA…]`: the exit code,
/// the task object (null when none was printed) and stderr.
pub fn run_task(
    dir: &Path,
    agent: &str,
    message: &str,
    data: &Path,
    extra: &[&str],
) -> (Option<i32>, Value, String) {
    let extra = [&["--json"], extra].concat();
    let (code, out, err) = run_in(&Env::default(), dir, agent, message, data, &extra);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null), err)
}

/// [`run_task`], after checking the exit code is 0: the task object.
pub fn run_json(dir: &Path, agent: &str, message: &str, data: &Path, extra: &[&str]) -> Value {
    let (code, task, err) = run_task(dir, agent, message, data, extra);
    assert_eq!(code, Some(0), "{err}");
    assert!(!task.is_null(), "no task object printed: {err}");
    task
}

/// `agentmesh events --data DATA TASK`: the events, parsed.
pub fn events(data: &Path, task: &Value) -> Vec<Value> {
    events_text(data, task)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `agentmesh events --data DATA TASK`: what it prints (a JSON event per line).
pub fn events_text(data: &Path, task: &Value) -> String {
    let (code, out, err) = agentmesh(&[
        "events",
        "--data",
        data.to_str().unwrap(),
        task["id"].as_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    out
}

/// The first event of `kind`.
pub fn first<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"))
}

/// The observations of a task's log, in order.
pub fn observations(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "ObservationEvent")
        .map(|e| e["result"].clone())
        .collect()
}

/// A chat-completions answer of an OpenAI-compatible endpoint with `text` and no calls.
pub fn completion(text: &str) -> String {
    serde_json::json!({
        "id": "r1",
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    })
    .to_string()
}

/// The text of each message in task `id`'s log that an arrival from trigger source `source`
/// (`webhook`, `mcp-event`, …) brought, in order.
pub fn triggered_messages(server: &Server, id: &str, source: &str) -> Vec<String> {
    let log = server
        .request("GET", &format!("/v1/tasks/{id}/events"))
        .send()
        .json();
    log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "MessageEvent" && e["metadata"]["trigger"]["source"] == source)
        .map(|e| {
            e["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// What a live stream sends until it ends, and whether it ended: not when it goes on for 20 s
/// (keep-alives come every 15 s) or sends a `stop` event kind.
pub fn rest_of_stream(sse: &mut BufReader<TcpStream>, stop: &[&str]) -> (String, bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while Instant::now() < deadline {
        let mut line = String::new();
        match sse.read_line(&mut line) {
            Ok(0) => return (text, true),
            Ok(_) => text.push_str(&line),
            Err(_) => break,
        }
        if stop.iter().any(|kind| line.contains(kind)) {
            break;
        }
    }
    (text, false)
}
