//! `cargo bench --bench mcp`: an MCP client calling a trivial Wasm tool through
//! `agentmesh mcp` (stdio).
//!
//! The tool runs the `test_panic` test program's `ok` action, which returns a constant: what
//! is measured is the host (the MCP transport, the task's call path with its event log, the
//! kept Wasm session). Reported:
//!
//! - **minimal client**: one JSON-RPC line written, one read, per call — 1,000 calls after 20
//!   warm-up, in one session; p50, p90, p99;
//! - **Python SDK client** (`mcp` from PyPI, `benches/mcp_sdk_client.py`): the same calls
//!   through `ClientSession.call_tool`; p50 as the client measures it;
//! - **cold start**: from spawning `agentmesh mcp` to the first call's result, the component
//!   already in the compiled cache (a first start filled it); `initialize`, `initialized` and
//!   the call are written at once. 20 starts; p50 and the fastest.
//!
//! And the other way, the host as an MCP client: an agent run (`agentmesh run`, the scripted
//! model) making 1,000 calls, one per step, of an `mcp` tool whose stdio server is the
//! `agentmesh mcp` above, against the same run calling a `cel` tool. A step's time is the
//! span of the steps' events (first call to last answer) over their number; the host's
//! overhead per MCP call is the `mcp` step less the `cel` step less the server's own time
//! (the minimal client's mean).

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/agent_run.rs"]
mod agent_run;
mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use agent_run::CONSTANT_TOOL;
use agentmesh_testkit::fixtures::{self, scripted_agent};
use common::{AGENTMESH, QUIET, load_average, machine, percentile};
use serde_json::{Value, json};

const WARM_UP: usize = 20;
const CALLS: usize = 1_000;
const COLD_STARTS: usize = 20;
/// Calls in a measured agent run, one per LLM step.
const STEPS: usize = 1_000;

/// A config dir with the tool `bench/trivial` (`ok`, on the `test_panic` program) and the
/// agent `bench/a` using it.
fn config(dir: &Path) {
    let component = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("guests/target/wasm32-wasip2/release/test_panic.wasm");
    assert!(
        component.is_file(),
        "{} is missing: build the guests first (`cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml --target-dir guests/target`)",
        component.display()
    );
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: bench
name: trivial
description: Returns a constant.
wasm: {{component: {}}}
actions:
  - name: ok
    description: Returns a constant.
",
        component.display()
    );
    let agent = scripted_agent("bench/a", "capabilities:\n  trivial: \"*\"\n");
    fixtures::write(
        dir,
        &[
            ("tool.yaml", &tool),
            ("agent.yaml", &agent),
            ("script.yaml", "responses:\n  - text: unused\n"),
        ],
    );
}

/// `agentmesh mcp` on `dir`, its stdin and stdout piped.
fn start(dir: &Path, data: &Path) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = Command::new(AGENTMESH)
        .args(["mcp", dir.to_str().unwrap(), "--agent", "bench/a"])
        .args(["--data", data.to_str().unwrap()])
        .env(QUIET.0, QUIET.1)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdin, stdout)
}

fn line(value: &Value) -> String {
    format!("{value}\n")
}

fn initialize() -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}});
    line(&init) + &line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
}

fn call(id: usize) -> String {
    line(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "trivial", "arguments": {}}}))
}

/// Reads lines until the answer to request `id`, which must be a successful call.
fn answer(out: &mut BufReader<ChildStdout>, id: usize) {
    let mut text = String::new();
    loop {
        text.clear();
        assert!(
            out.read_line(&mut text).unwrap() > 0,
            "agentmesh mcp closed"
        );
        let message: Value = serde_json::from_str(&text).unwrap();
        if message["id"] == json!(id) {
            assert!(message.get("error").is_none(), "{text}");
            assert_ne!(message["result"]["isError"], json!(true), "{text}");
            return;
        }
    }
}

fn stop(mut child: Child, stdin: ChildStdin) {
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "agentmesh mcp exited with {status}");
}

fn minimal_client(dir: &Path, data: &Path) -> Vec<Duration> {
    let (child, mut stdin, mut out) = start(dir, data);
    stdin.write_all(initialize().as_bytes()).unwrap();
    answer(&mut out, 0);
    let mut times = Vec::with_capacity(CALLS);
    for id in 1..=WARM_UP + CALLS {
        let request = call(id);
        let started = Instant::now();
        stdin.write_all(request.as_bytes()).unwrap();
        answer(&mut out, id);
        if id > WARM_UP {
            times.push(started.elapsed());
        }
    }
    stop(child, stdin);
    times.sort_unstable();
    times
}

fn cold_starts(dir: &Path, data: &Path) -> Vec<Duration> {
    let mut times = Vec::with_capacity(COLD_STARTS);
    for _ in 0..COLD_STARTS {
        let started = Instant::now();
        let (child, mut stdin, mut out) = start(dir, data);
        stdin
            .write_all((initialize() + &call(1)).as_bytes())
            .unwrap();
        answer(&mut out, 1);
        times.push(started.elapsed());
        stop(child, stdin);
    }
    times.sort_unstable();
    times
}

/// The Python SDK client's p50 (µs), or why it could not run.
fn sdk_client(dir: &Path, data: &Path) -> Result<f64, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/mcp_sdk_client.py");
    let out = Command::new("python3")
        .arg(script)
        .args([WARM_UP.to_string(), CALLS.to_string()])
        .args([
            AGENTMESH,
            "mcp",
            dir.to_str().unwrap(),
            "--agent",
            "bench/a",
        ])
        .args(["--data", data.to_str().unwrap()])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let figures: Value = serde_json::from_str(text.trim()).map_err(|_| {
        format!(
            "the SDK client failed (`python3 -m pip install mcp==2.3.0`): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    figures["p50_us"]
        .as_f64()
        .ok_or_else(|| format!("no p50 in {figures}"))
}

/// Runs `client/b` of `dir` to its end; the mean time of a step, from the first call to the
/// last answer, every answer checked to be a result.
fn step_time(dir: &Path, data: &Path) -> Duration {
    let events = agent_run::events(AGENTMESH, dir, "client/b", data);
    let failed = events
        .iter()
        .find(|e| e["kind"] == "ObservationEvent" && e["result"].get("error").is_some());
    if let Some(failed) = failed {
        panic!("a call failed: {failed}");
    }
    let calls = agent_run::times(&events, "ActionEvent");
    let answers = agent_run::times(&events, "ObservationEvent");
    assert_eq!((calls.len(), answers.len()), (STEPS, STEPS));
    let span = answers[STEPS - 1] - calls[0];
    Duration::from_micros(span.unsigned_abs()) / STEPS as u32
}

/// The host as an MCP client: per-step times of `cel` and `mcp` runs (interleaved, three
/// each) and the MCP overhead given the server's own mean time `server`.
fn as_client(root: &Path, server_dir: &Path, server_data: &Path, server: Duration) {
    let mcp = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: client
name: remote
description: The trivial tool of another agentmesh, over MCP.
mcp: {{transport: stdio, command: {AGENTMESH}, args: [mcp, {}, --agent, bench/a, --data, {}]}}
actions:
  - name: ok
    description: Returns a constant.
    execute: {{mcp: {{tool_name: trivial}}}}
",
        server_dir.display(),
        server_data.display()
    );
    let (cel_dir, mcp_dir) = (root.join("cel"), root.join("mcp"));
    agent_run::config(
        &cel_dir,
        "client/b",
        CONSTANT_TOOL,
        "constant",
        "constant",
        STEPS,
    );
    agent_run::config(&mcp_dir, "client/b", &mcp, "remote", "remote", STEPS);
    let (mut cel_steps, mut mcp_steps) = (Vec::new(), Vec::new());
    for round in 0..3 {
        cel_steps.push(step_time(&cel_dir, &root.join(format!("cel-data-{round}"))));
        mcp_steps.push(step_time(&mcp_dir, &root.join(format!("mcp-data-{round}"))));
    }
    cel_steps.sort_unstable();
    mcp_steps.sort_unstable();
    let (cel, mcp) = (cel_steps[1], mcp_steps[1]);
    println!(
        "agent run, {STEPS} steps (median of 3 interleaved runs): cel step {:.1} µs, mcp step {:.1} µs; server's own time {:.1} µs; host overhead per MCP call {:.1} µs",
        us(cel),
        us(mcp),
        us(server),
        us(mcp) - us(cel) - us(server),
    );
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let root = tempfile::tempdir().unwrap();
    let (dir, data) = (root.path().join("config"), root.path().join("data"));
    config(&dir);
    // A first start, whose client leaves at once, fills the compiled cache of the data dir
    // as a host that ran before would have.
    let first = Command::new(AGENTMESH)
        .args(["mcp", dir.to_str().unwrap(), "--agent", "bench/a"])
        .args(["--data", data.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(first.status.success(), "{first:?}");
    println!("machine: {}; load before: {}", machine(), load_average());
    let minimal = minimal_client(&dir, &data);
    println!(
        "minimal client, {CALLS} calls after {WARM_UP}: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs",
        us(percentile(&minimal, 0.5)),
        us(percentile(&minimal, 0.9)),
        us(percentile(&minimal, 0.99)),
    );
    match sdk_client(&dir, &data) {
        Ok(p50) => println!("Python SDK client, {CALLS} calls after {WARM_UP}: p50 {p50:.1} µs"),
        Err(why) => println!("Python SDK client: not measured: {why}"),
    }
    let mean = minimal.iter().sum::<Duration>() / minimal.len() as u32;
    as_client(root.path(), &dir, &data, mean);
    let cold = cold_starts(&dir, &data);
    println!(
        "cold start to the first result, {COLD_STARTS} starts: p50 {:.1} ms, fastest {:.1} ms",
        us(percentile(&cold, 0.5)) / 1e3,
        us(cold[0]) / 1e3,
    );
    println!("load after: {}", load_average());
}
