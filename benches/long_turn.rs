//! `cargo bench --bench long_turn`: whether a step of a long turn costs at its end what it
//! costs at its start.
//!
//! One `agentmesh run` of one turn of [`STEPS`] LLM steps (env `LONG_TURN_STEPS`; the windows
//! are its first and last tenth): the scripted model (no usage in
//! the script, so every request's prompt tokens are estimated, as for a provider that
//! reports none) answers each step with one call of a `cel` tool, then a final text. A
//! window's per-step time is the span of its steps' events, from its first step's
//! `ActionEvent` to its last step's `ObservationEvent`, over its number of steps; reported
//! for steps 1–200 and 1,801–2,000, with their ratio (the target: ≤ 1.2).
//!
//! Event timestamps have millisecond resolution and a window of 200 steps lasts a few
//! milliseconds, so one run says little: each figure is the mean over [`RUNS`] runs (env
//! `LONG_TURN_RUNS`). A span read off millisecond timestamps whose phase against the
//! millisecond grid varies from run to run is right on average.
//!
//! With `AGENTMESH_BASELINE=/path/to/an/older/agentmesh`, that binary's runs are interleaved
//! with this tree's (baseline, this, baseline, this, …) and both are reported: the
//! comparison the figures in BENCHMARKS.md come from.

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/agent_run.rs"]
mod agent_run;
mod common;

use std::path::Path;
use std::time::Duration;

use agent_run::CONSTANT_TOOL;
use common::{AGENTMESH, load_average, machine, percentile};

/// LLM steps in the turn, each one call, unless `LONG_TURN_STEPS` says otherwise; a measured
/// window is a tenth of them, the first and the last.
const STEPS: usize = 2_000;
/// Runs per binary, unless `LONG_TURN_RUNS` says otherwise.
const RUNS: usize = 50;

/// What one run measured: the windows' spans (µs), the span of the whole turn.
#[derive(Clone, Copy)]
struct Run {
    /// The span of the first window.
    first: f64,
    /// The span of the last window.
    last: f64,
    /// The span of every step.
    all: Duration,
}

/// One turn of `agentmesh` (a binary) on `dir`, its events read back with the same binary.
fn run(agentmesh: &str, dir: &Path, data: &Path, steps: usize) -> Run {
    let events = agent_run::events(agentmesh, dir, "client/long", data);
    let calls = agent_run::times(&events, "ActionEvent");
    let answers = agent_run::times(&events, "ObservationEvent");
    assert_eq!((calls.len(), answers.len()), (steps, steps));
    let window = steps / 10;
    // Steps `from..=to`, counted from 1.
    let span = |from: usize, to: usize| (answers[to - 1] - calls[from - 1]) as f64;
    Run {
        first: span(1, window),
        last: span(steps - window + 1, steps),
        all: Duration::from_micros(span(1, steps) as u64),
    }
}

/// Per-step means over `runs`, as a line.
fn report(name: &str, runs: &[Run], steps: usize) {
    let window = steps / 10;
    let n = runs.len() as f64;
    let first = runs.iter().map(|r| r.first).sum::<f64>() / n;
    let last = runs.iter().map(|r| r.last).sum::<f64>() / n;
    let mut all: Vec<Duration> = runs.iter().map(|r| r.all).collect();
    all.sort_unstable();
    let mean = all.iter().sum::<Duration>() / runs.len() as u32;
    let per_step = |d: Duration| d.as_secs_f64() * 1e6 / steps as f64;
    println!(
        "{name}: steps 1–{window} {:.2} µs/step, steps {}–{steps} {:.2} µs/step, ratio {:.2}; \
         all {steps} steps {:.2} µs/step (p50 of the runs {:.2}); {} runs",
        first / window as f64,
        steps - window + 1,
        last / window as f64,
        last / first,
        per_step(mean),
        per_step(percentile(&all, 0.5)),
        runs.len(),
    );
}

/// The number in the environment variable `name`, or `default`.
fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runs = setting("LONG_TURN_RUNS", RUNS);
    let steps = setting("LONG_TURN_STEPS", STEPS).max(10);
    let baseline = std::env::var("AGENTMESH_BASELINE").ok();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    agent_run::config(
        &dir,
        "client/long",
        CONSTANT_TOOL,
        "constant",
        "constant",
        steps,
    );
    println!("machine: {}; load before: {}", machine(), load_average());
    let mut binaries = Vec::new();
    if let Some(path) = &baseline {
        binaries.push(("baseline", path.as_str()));
    }
    binaries.push(("this tree", AGENTMESH));
    let mut measured = vec![Vec::with_capacity(runs); binaries.len()];
    for round in 0..runs {
        for (i, (_, binary)) in binaries.iter().enumerate() {
            let data = root.path().join(format!("data-{i}-{round}"));
            measured[i].push(run(binary, &dir, &data, steps));
            std::fs::remove_dir_all(&data).unwrap();
        }
    }
    for ((name, _), runs) in binaries.iter().zip(&measured) {
        report(name, runs, steps);
    }
    println!("load after: {}", load_average());
}
