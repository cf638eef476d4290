//! A store call that blocks (a disk that stopped answering) holds up no async worker of the
//! runtime that called the engine: the API's calls move off the worker first, and task runners
//! run on the turn pool, whose threads may block. The store here is sled behind a function
//! that holds each call while the test says so.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentmesh_engine::{Engine, EngineOptions, NewTask, Origin, Run, Status, UserRef};
use agentmesh_store::Offloaded;
use agentmesh_testkit::engine::{SCRIPTED_AGENT, engine_on, write_config};
use serde_json::json;

/// Store calls made on threads named `api…` wait while this is set (the tests run at once:
/// each stalls the threads of its own runtimes).
static API_STALLED: AtomicBool = AtomicBool::new(false);
/// The same for the threads of the turn pool (`agentmesh-turn…`).
static TURNS_STALLED: AtomicBool = AtomicBool::new(false);

fn stall(_call: &'static str, f: &mut dyn FnMut()) {
    let name = std::thread::current().name().unwrap_or_default().to_owned();
    let flag = if name.starts_with("api") {
        Some(&API_STALLED)
    } else if name.starts_with("agentmesh-turn") {
        Some(&TURNS_STALLED)
    } else {
        None
    };
    while flag.is_some_and(|f| f.load(Ordering::SeqCst)) {
        std::thread::sleep(Duration::from_millis(1));
    }
    f();
}

fn engine(dir: &std::path::Path, turns: Option<tokio::runtime::Handle>) -> Engine {
    write_config(
        dir,
        SCRIPTED_AGENT,
        &[(
            "script.yaml",
            "responses:\n  - text: One.\n  - text: Two.\n",
        )],
    );
    let sled = agentmesh_store::open(&dir.join("data")).unwrap();
    let store = Arc::new(Offloaded::new(sled, stall));
    let options = EngineOptions {
        turns,
        ..EngineOptions::default()
    };
    engine_on(dir, store, options)
}

/// A runtime of one worker, its threads named `name`.
fn one_worker(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
}

/// Ticks every 5 ms on the runtime's worker: how many times it ticked in `span`.
fn ticks_during(rt: &tokio::runtime::Runtime, span: Duration) -> usize {
    let ticks = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ticks);
    let heartbeat = rt.spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    std::thread::sleep(span);
    heartbeat.abort();
    ticks.load(Ordering::SeqCst)
}

fn user() -> UserRef {
    UserRef {
        id: "user:t".into(),
        email: None,
    }
}

#[test]
fn store_calls_stuck_in_the_store_leave_the_callers_workers_free() {
    let dir = tempfile::tempdir().unwrap();
    let server = one_worker("api-server");
    let engine = engine(dir.path(), None);
    let new = NewTask {
        agent: "t/a".into(),
        input: None,
        user: user(),
    };
    let id = server
        .block_on(engine.create_task(new, Run::Background))
        .unwrap()
        .id;

    // Deleting the task writes to the store, which does not answer.
    API_STALLED.store(true, Ordering::SeqCst);
    let deleting = {
        let (engine, id) = (engine.clone(), id.clone());
        server.spawn(async move { engine.delete_task(&id).await })
    };
    let ticks = ticks_during(&server, Duration::from_millis(300));
    let answered = deleting.is_finished();
    // Released before asserting: a failure must not leave the runtime's thread stuck.
    API_STALLED.store(false, Ordering::SeqCst);
    assert!(
        ticks >= 20,
        "the worker ticked {ticks} times in 300 ms while a store call was stuck"
    );
    assert!(!answered, "the stalled store answered");
    server.block_on(deleting).unwrap().unwrap();
    assert_eq!(engine.task(&id).unwrap().status(), Status::Terminated);
}

#[test]
fn a_turn_stuck_in_the_store_stalls_the_turn_pool_not_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = one_worker("server");
    let turns = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("agentmesh-turn-test")
        .on_thread_start(agentmesh_engine::mark_turn_thread)
        .enable_all()
        .build()
        .unwrap();
    let engine = engine(dir.path(), Some(turns.handle().clone()));
    TURNS_STALLED.store(true, Ordering::SeqCst);
    let new = NewTask {
        agent: "t/a".into(),
        input: Some(json!({"message": "hi"})),
        user: user(),
    };
    // Queued by the server (its write passes); the runner's calls on the turn pool wait.
    let id = server
        .block_on(engine.create_task(new, Run::Background))
        .unwrap()
        .id;
    let ticks = ticks_during(&server, Duration::from_millis(300));
    let ran = !engine.task(&id).unwrap().outputs.is_empty();
    TURNS_STALLED.store(false, Ordering::SeqCst);
    assert!(
        ticks >= 20,
        "the server's worker ticked {ticks} times in 300 ms"
    );
    assert!(
        !ran,
        "the turn ran although the store did not answer its runner"
    );
    let start = Instant::now();
    loop {
        let task = engine.task(&id).unwrap();
        if task.status() == Status::Idle && task.outputs.len() == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the turn never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The next input runs on the turn pool too.
    server
        .block_on(engine.submit(
            &id,
            json!({"message": "again"}),
            Origin::User,
            Run::Background,
        ))
        .unwrap();
    let start = Instant::now();
    while engine.task(&id).unwrap().outputs.len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the second turn never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
