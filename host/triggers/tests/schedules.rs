//! The scheduler firing concurrently: a burst of schedules due at one instant fires each tick
//! once, and wakeups of one task due together still reach its queue in due order.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use agentmesh_engine::{Engine, Run};
use agentmesh_model::event::{EventKind, EventSource};
use agentmesh_testkit::engine::{SCRIPTED_AGENT, engine_at, write_config};
use agentmesh_timing::clock::{now_ms, rfc3339};
use agentmesh_triggers::Triggers;

/// Polls `check` until it gives a value, for at most `limit`.
async fn wait_for<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A config dir and an engine over it, with firing hooked to it.
struct Harness {
    _dir: tempfile::TempDir,
    engine: Engine,
    triggers: Triggers,
}

/// `manifests` and the model script `script` in a fresh config dir, and an engine over it.
fn harness(manifests: &str, script: &str) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), manifests, &[("script.yaml", script)]);
    let engine = engine_at(dir.path(), Some(Duration::from_secs(5)));
    let triggers = Triggers::new(engine.clone()).unwrap();
    Harness {
        _dir: dir,
        engine,
        triggers,
    }
}

/// Arms the schedules and runs the scheduler until the returned task is aborted.
async fn scheduler(triggers: &Triggers) -> tokio::task::JoinHandle<()> {
    triggers.start().await.unwrap();
    tokio::spawn(triggers.clone().run())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_schedules_due_at_one_instant_fires_each_tick_once() {
    const BURST: usize = 300;
    let at = rfc3339(now_ms() + 1_500);
    let mut manifests = format!("{SCRIPTED_AGENT}---\n");
    for n in 0..BURST {
        write!(
            manifests,
            "kind: commonagents.info/v1/schedule
namespace: t
name: s{n}
agent: a
owner: user:ops@example.com
at: \"{at}\"
inputs:
  message: Tick.
---
"
        )
        .unwrap();
    }
    let h = harness(&manifests, "responses:\n  - text: Done.\n");
    let running = scheduler(&h.triggers).await;
    let listed = wait_for(Duration::from_secs(30), || {
        let listed = h.triggers.schedules(None, None).unwrap().schedules;
        listed
            .iter()
            .all(|s| s.status.total_triggers > 0)
            .then_some(listed)
    })
    .await
    .expect("every tick of the burst fires");
    // Each tick was recorded once, with its own task: none fired twice, none lost.
    assert_eq!(listed.len(), BURST);
    let mut tasks = Vec::new();
    for s in &listed {
        assert_eq!(s.status.total_triggers, 1, "{}", s.plan.id());
        assert_eq!(s.next_ms, None, "{}: an `at` fires once", s.plan.id());
        tasks.push(s.status.last_task_id.clone().unwrap());
    }
    tasks.sort_unstable();
    tasks.dedup();
    assert_eq!(tasks.len(), BURST);
    // Each task is made by its runner, from the schedule, once its tick's input is queued.
    let made = wait_for(Duration::from_secs(30), || {
        let made = h.engine.list_tasks(Some("t/a"), None, None).unwrap();
        (made.len() >= BURST).then_some(made)
    })
    .await
    .expect("every tick's task is made");
    let mut made: Vec<String> = made.into_iter().map(|t| t.id).collect();
    made.sort_unstable();
    assert_eq!(made, tasks);
    running.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_of_one_task_due_together_reach_its_queue_in_due_order() {
    const WAKEUPS: usize = 6;
    let mut calls = String::new();
    for n in 0..WAKEUPS {
        writeln!(
            calls,
            "      - {{name: request_wakeup, arguments: {{when: {{kind: delay_ms, value: 1000}}, prompt: w{n}, reason: check}}}}"
        )
        .unwrap();
    }
    let script = format!("responses:\n  - tool_calls:\n{calls}  - text: Sleeping.\n");
    let h = harness(SCRIPTED_AGENT, &script);
    let running = scheduler(&h.triggers).await;
    let task = h
        .engine
        .create_task(
            agentmesh_testkit::engine::new_task("t/a", "Sleep."),
            Run::Caller,
        )
        .await
        .unwrap();
    h.engine.run_until_idle(&task.id).await.unwrap();
    let woken = wait_for(Duration::from_secs(30), || {
        let texts: Vec<String> = h
            .engine
            .events(&task.id, 0)
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::MessageEvent { content, metadata }
                    if e.source == EventSource::User
                        && metadata
                            .as_ref()
                            .and_then(|m| m.trigger.as_ref())
                            .is_some_and(|t| t.source == "self-schedule") =>
                {
                    content[0].text.clone()
                }
                _ => None,
            })
            .collect();
        (texts.len() >= WAKEUPS).then_some(texts)
    })
    .await
    .expect("every wakeup fires");
    let requested: Vec<String> = (0..WAKEUPS).map(|n| format!("w{n}")).collect();
    assert_eq!(woken, requested);
    running.abort();
}
