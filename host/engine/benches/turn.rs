//! `cargo bench -p agentmesh-engine --bench turn`: host overhead of a turn.
//!
//! A turn is one user input → a scripted LLM response calling one `cel` tool (through a
//! `before` assert) → its observation → a scripted final answer. The scripted model answers
//! from memory, so a turn's wall time is the host's own work: guardrails, context building,
//! CEL, the event log in sled (on disk, in a temp dir), the conversion of the log to messages.
//! Queueing the input (`submit`) includes the fsync that makes it durable; it is reported
//! apart from the turn.
//!
//! Cases: 100 tasks of 5 turns one at a time, the same 100 at once, one task of 400 turns
//! (whether a turn's cost grows with the task: its first 50 turns against its last 50),
//! one task of 3,000 turns on a host that condenses (its first 100 turns against its last
//! 100), the first case again on a host with secrets (every logged event is scrubbed), then
//! the first two cases on a PostgreSQL store (a real server the bench starts; the Debian package
//! `postgresql` must be installed), then the CEL assert alone. Naming cases runs only those
//! (`single`, `concurrent`, `long`, `condensed`, `secrets`, `postgres`, `cel`): `cargo bench -p agentmesh-engine --bench turn -- single`, e.g.
//! under callgrind, whose instruction counts do not vary with the machine's load.

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_engine::{Engine, EngineOptions, NewTask, Origin, Plan, Run, UserRef};
use agentmesh_expr::{Activation, Expression};
use agentmesh_store::Backend;
use serde_json::json;

/// The allocator of the `agentmesh` binary, so the figures are the shipped host's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TURNS_PER_TASK: usize = 5;

/// Turns of the one long task, which shows whether a turn's cost grows with the task.
const LONG_TASK_TURNS: usize = 400;

/// Turns of the long task with condensation configured.
const CONDENSED_TASK_TURNS: usize = 3000;

/// The bench's tool: one `cel` action.
const CALC_TOOL: &str = "kind: commonagents.info/v1beta2/tool
namespace: b
name: calc
description: Adds.
actions:
  - name: add
    description: Add two integers.
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}}
    execute:
      cel: {expression: \"{'result': input.a + input.b}\"}
---
";

/// Writes [`CALC_TOOL`] and the bench agent `b/a` (its manifest ending with `rest`) into
/// `dir`, with a script of `turns` turns, each calling `calc` with a new value, then answering.
fn write_config(dir: &std::path::Path, rest: &str, turns: usize) {
    let agent = "kind: commonagents.info/v1beta2/agent
namespace: b
name: a
description: Bench agent.
prompt: You help {context.user.id}.
model: scripted/script.yaml
";
    std::fs::write(
        dir.join("manifests.yaml"),
        [CALC_TOOL, agent, rest].concat(),
    )
    .unwrap();
    let mut script = String::from("responses:\n");
    for i in 0..turns {
        writeln!(
            script,
            "  - tool_calls: [{{name: calc, arguments: {{a: {i}, b: 2}}}}]"
        )
        .unwrap();
        writeln!(
            script,
            "    usage: {{prompt_tokens: 100, completion_tokens: 10}}"
        )
        .unwrap();
        writeln!(script, "  - text: \"The answer is {}.\"", i + 2).unwrap();
        writeln!(
            script,
            "    usage: {{prompt_tokens: 120, completion_tokens: 8}}"
        )
        .unwrap();
    }
    std::fs::write(dir.join("script.yaml"), script).unwrap();
}

fn config(dir: &std::path::Path) {
    write_config(
        dir,
        "capabilities:
  calc:
    before:
      - assert: \"context.capabilities.calc.count_successful < 1000 && context.user.id != ''\"
guardrails:
  before:
    - assert: \"size(input.message) > 0\"
",
        LONG_TASK_TURNS,
    );
}

/// [`config`] on a host with eight secrets (model API keys given literally).
fn secrets_config(dir: &std::path::Path) {
    config(dir);
    let mut host = String::from("kind: agentmesh/v1/host\nmodels:\n");
    for i in 0..8 {
        writeln!(
            host,
            "  p{i}: {{base_url: \"http://127.0.0.1:9\", api_key: sk-bench-key-{i:04}-7f3a9c2e}}"
        )
        .unwrap();
    }
    std::fs::write(dir.join("host.yaml"), host).unwrap();
}

/// The agent calling `calc` once a turn (each call with a new value, so its allow list
/// grows), on a host that condenses past 40 events, keeping 10. A summarizing call takes the
/// next scripted response like any call: the turn after it answers without calling, then the
/// script is in step again; it holds enough responses for the summaries (one every ~15 turns).
fn condensed_config(dir: &std::path::Path) {
    write_config(
        dir,
        "capabilities:
  calc: \"*\"
---
kind: agentmesh/v1/host
condensation: {max_events: 40, keep_recent: 10}
",
        2 * CONDENSED_TASK_TURNS,
    );
}

fn engine(dir: &std::path::Path) -> (Engine, Arc<dyn Backend>) {
    engine_on(dir, agentmesh_store::open(&dir.join("data")).unwrap())
}

fn engine_on(dir: &std::path::Path, store: Arc<dyn Backend>) -> (Engine, Arc<dyn Backend>) {
    let report = agentmesh_manifest::validate(dir);
    assert!(!report.has_errors(), "{:?}", report.diagnostics);
    let plan = Plan::build(&report.config, &|_| None).unwrap();
    (
        Engine::new(plan, Arc::clone(&store), EngineOptions::default()),
        store,
    )
}

struct Sample {
    submit: Duration,
    turn: Duration,
    /// Of `turn`, the time this thread was on a CPU (`None` when the turn moved threads or
    /// the kernel does not report it).
    on_cpu: Option<Duration>,
}

/// This thread's CPU time so far, and its id. The machine is shared, so wall time includes
/// waiting for a CPU; this does not.
fn cpu_time() -> Option<(Duration, std::thread::ThreadId)> {
    let t = cpu_time::ThreadTime::try_now().ok()?;
    Some((t.as_duration(), std::thread::current().id()))
}

/// Runs `turns` turns on a new task; one sample per turn.
async fn task_turns(engine: &Engine, turns: usize) -> Vec<Sample> {
    let task = engine
        .create_task(
            NewTask {
                agent: "b/a".into(),
                input: None,
                user: UserRef {
                    id: "user:bench".into(),
                    email: None,
                },
            },
            Run::Caller,
        )
        .await
        .unwrap();
    let mut samples = Vec::new();
    for i in 0..turns {
        let start = Instant::now();
        engine
            .submit(
                &task.id,
                json!({"message": format!("What is {i} + 2?")}),
                Origin::User,
                Run::Caller,
            )
            .await
            .unwrap();
        let cpu_start = cpu_time();
        let submitted = Instant::now();
        let record = engine.run_until_idle(&task.id).await.unwrap();
        let done = Instant::now();
        let cpu_end = cpu_time();
        assert_eq!(record.outputs.len(), i + 1);
        assert_eq!(record.status(), agentmesh_engine::Status::Idle);
        samples.push(Sample {
            submit: submitted - start,
            turn: done - submitted,
            on_cpu: match (cpu_start, cpu_end) {
                (Some((a, t1)), Some((b, t2))) if t1 == t2 => Some(b - a),
                _ => None,
            },
        });
    }
    samples
}

/// 100 tasks of [`TURNS_PER_TASK`] turns at once, each on a tokio task of its own.
async fn concurrent_turns(engine: &Engine) -> Vec<Sample> {
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move { task_turns(&engine, TURNS_PER_TASK).await })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(label: &str, samples: &[Sample], wall: Duration) {
    let mut turns: Vec<Duration> = samples.iter().map(|s| s.turn).collect();
    let mut submits: Vec<Duration> = samples.iter().map(|s| s.submit).collect();
    let mut on_cpu: Vec<Duration> = samples.iter().filter_map(|s| s.on_cpu).collect();
    turns.sort();
    submits.sort();
    on_cpu.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{label:<28} {:>6} turns  {:>8.0} turns/s  turn p50 {:>7.1} µs  p99 {:>7.1} µs   submit+fsync p50 {:>7.1} µs  p99 {:>7.1} µs",
        samples.len(),
        samples.len() as f64 / wall.as_secs_f64(),
        us(percentile(&turns, 0.5)),
        us(percentile(&turns, 0.99)),
        us(percentile(&submits, 0.5)),
        us(percentile(&submits, 0.99)),
    );
    if on_cpu.len() * 10 >= samples.len() * 9 {
        println!(
            "{:<28} {:>6} turns on one thread: on-CPU p50 {:>7.1} µs  p99 {:>7.1} µs",
            "",
            on_cpu.len(),
            us(percentile(&on_cpu, 0.5)),
            us(percentile(&on_cpu, 0.99)),
        );
    }
}

/// Prints the turn p50 over the first `n` turns of one task against its last `n`.
fn first_against_last(label: &str, turns: &[Sample], n: usize) {
    let p50 = |turns: &[Sample]| {
        let mut t: Vec<Duration> = turns.iter().map(|s| s.turn).collect();
        t.sort();
        percentile(&t, 0.5).as_secs_f64() * 1e6
    };
    let total = turns.len();
    let (first, last) = (p50(&turns[..n]), p50(&turns[total - n..]));
    println!(
        "{label}: turn p50 {first:.1} µs over turns 1-{n}, {last:.1} µs over turns {}-{total} ({:.2}x)",
        total - n + 1,
        last / first,
    );
}

fn cel_assert() {
    let expr = Expression::compile(
        "context.capabilities['calc'].count_successful < 20 && context.user.id != ''",
    )
    .unwrap();
    // A realistic context: 10 inputs and outputs, a capability with 10 recorded calls.
    let calls: Vec<_> = (0..10).map(|i| json!({"a": i, "b": 2})).collect();
    let context = json!({
        "agent": {"name": "a", "namespace": "b", "started_at": "2026-11-22T10:00:00Z"},
        "user": {"id": "user:bench", "email": "bench@example.com"},
        "llm": {"model": "scripted/x", "tokens": {"total": 2200, "prompt": 2000, "completion": 200}},
        "_history": {"turns": ["input", "llm", "capability", "llm"], "turn_count": 4},
        "input": (0..10).map(|i| json!({"message": [{"mimeType": "text/plain", "text": format!("question {i}")}]})).collect::<Vec<_>>(),
        "output": (0..10).map(|i| json!({"message": [{"mimeType": "text/plain", "text": format!("answer {i}")}]})).collect::<Vec<_>>(),
        "capabilities": {
            "_meta": {"invocations": vec!["calc"; 10], "count": 10, "delegation_count": 0},
            "calc": {"count_successful": 10, "count_errored": 0, "count_restricted": 0,
                     "inputs": calls, "outputs": vec![json!({"result": 3}); 10],
                     "timestamps": vec!["2026-11-22T10:00:00Z"; 10],
                     "successful": vec![true; 10], "errored": vec![false; 10], "restricted": vec![false; 10]},
        },
    });
    let build = Instant::now();
    let n_build = 2_000;
    let mut act = Activation::new();
    for _ in 0..n_build {
        act = Activation::new();
        act.set_aliased("context", "c", context.clone());
    }
    let build = build.elapsed() / n_build;
    let n = 200_000;
    let start = Instant::now();
    for _ in 0..n {
        assert!(expr.evaluate_bool(&act).unwrap());
    }
    let eval = start.elapsed() / n;
    println!(
        "CEL assert with a realistic context: eval {:.2} µs (target < 2 µs); building the activation from JSON {:.1} µs",
        eval.as_secs_f64() * 1e6,
        build.as_secs_f64() * 1e6
    );
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument names a case to run.
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs = |case: &str| named.is_empty() || named.iter().any(|n| n == case);
    let dir = tempfile::tempdir().unwrap();
    config(dir.path());
    let (engine, store) = engine(dir.path());
    // Turns run where `serve` runs them: on threads of the turn pool, this one included.
    agentmesh_engine::mark_turn_thread();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(agentmesh_engine::mark_turn_thread)
        .enable_all()
        .build()
        .unwrap();

    // Warm-up.
    rt.block_on(task_turns(&engine, TURNS_PER_TASK));

    if runs("single") {
        let start = Instant::now();
        let writes = store.write_count();
        let mut single = Vec::new();
        for _ in 0..100 {
            single.extend(rt.block_on(task_turns(&engine, TURNS_PER_TASK)));
        }
        report("single task at a time", &single, start.elapsed());
        println!(
            "{:<28} store writes per turn (submit included): {:.1}",
            "",
            (store.write_count() - writes) as f64 / single.len() as f64
        );
    }

    if runs("concurrent") {
        let start = Instant::now();
        let concurrent = rt.block_on(concurrent_turns(&engine));
        report("100 concurrent tasks", &concurrent, start.elapsed());
    }

    if runs("long") {
        // One task for many turns: the first turns against the last.
        let long = rt.block_on(task_turns(&engine, LONG_TASK_TURNS));
        first_against_last(&format!("one task, {LONG_TASK_TURNS} turns"), &long, 50);
    }

    if runs("condensed") {
        // One task for many more turns, condensed as it goes: a turn reads only the LLM's
        // view (the prompt and what follows the last forgotten range), whatever its age.
        let condensed_dir = tempfile::tempdir().unwrap();
        condensed_config(condensed_dir.path());
        let (condensed_engine, _) = self::engine(condensed_dir.path());
        let long = rt.block_on(task_turns(&condensed_engine, CONDENSED_TASK_TURNS));
        let label = format!("one task, {CONDENSED_TASK_TURNS} turns, condensed past 40 events");
        first_against_last(&label, &long, 100);
    }
    if runs("secrets") {
        // The single-task case on a host with secrets: every logged event is searched for
        // them (none occurs, as in most turns).
        let secrets_dir = tempfile::tempdir().unwrap();
        secrets_config(secrets_dir.path());
        let (secrets_engine, _) = self::engine(secrets_dir.path());
        rt.block_on(task_turns(&secrets_engine, TURNS_PER_TASK));
        let start = Instant::now();
        let mut single = Vec::new();
        for _ in 0..100 {
            single.extend(rt.block_on(task_turns(&secrets_engine, TURNS_PER_TASK)));
        }
        report("single, 8 secrets configured", &single, start.elapsed());
    }
    if runs("postgres") {
        // The single-task and concurrent cases on a PostgreSQL store (a real server started
        // for the bench, on loopback, with fsync on).
        let pg = agentmesh_testkit::postgres::Postgres::start();
        let pg_dir = tempfile::tempdir().unwrap();
        config(pg_dir.path());
        let url = pg.new_database();
        let pg_store = Arc::new(
            agentmesh_store::PgStore::open(&agentmesh_store::PgOptions {
                url,
                pool: 16,
                lease: agentmesh_store::postgres::DEFAULT_LEASE,
            })
            .unwrap(),
        );
        let (pg_engine, store) = engine_on(pg_dir.path(), Arc::clone(&pg_store) as _);
        rt.block_on(task_turns(&pg_engine, TURNS_PER_TASK));
        let before = pg_store.round_trips();
        let start = Instant::now();
        let writes = store.write_count();
        let mut single = Vec::new();
        for _ in 0..100 {
            single.extend(rt.block_on(task_turns(&pg_engine, TURNS_PER_TASK)));
        }
        report("single, PostgreSQL", &single, start.elapsed());
        let turns = single.len() as f64;
        println!(
            "{:<28} store writes per turn (submit included): {:.1}; round trips per turn: {:.1}",
            "",
            (store.write_count() - writes) as f64 / turns,
            (pg_store.round_trips() - before) as f64 / turns
        );
        let start = Instant::now();
        let concurrent = rt.block_on(concurrent_turns(&pg_engine));
        report("100 concurrent, PostgreSQL", &concurrent, start.elapsed());
    }
    if runs("cel") {
        cel_assert();
    }
}
