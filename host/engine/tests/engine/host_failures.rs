//! The store failing a write whose failure the caller is told of: what the caller was told did
//! not happen leaves nothing behind that runs. The store here is sled behind a function that
//! refuses the calls the test names.

use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_engine::{EngineError, NewTask, Reason, Run, Status, UserRef};
use agentmesh_store::StoreError;
use agentmesh_testkit::engine::{engine_through, write_config};
use serde_json::json;

use crate::util::SCRIPTED_AGENT;

/// While set, the store refuses to queue input.
static QUEUE_WRITES_FAIL: AtomicBool = AtomicBool::new(false);

fn faults(call: &'static str, f: &mut dyn FnMut()) {
    let queuing = matches!(call, "queue_deferred" | "queue_durably");
    if !(queuing && QUEUE_WRITES_FAIL.load(Ordering::SeqCst)) {
        f();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_first_input_cannot_be_queued_is_deleted_not_left_idle() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        SCRIPTED_AGENT,
        &[("script.yaml", "responses:\n  - text: Hi.\n")],
    );
    let engine = engine_through(dir.path(), faults);
    let new = NewTask {
        agent: "t/a".into(),
        input: Some(json!({"message": "hello"})),
        user: UserRef {
            id: "user:alice".into(),
            email: None,
        },
    };

    QUEUE_WRITES_FAIL.store(true, Ordering::SeqCst);
    let created = engine.create_task(new, Run::Background).await;
    QUEUE_WRITES_FAIL.store(false, Ordering::SeqCst);
    assert!(
        matches!(&created, Err(EngineError::Store(StoreError::Io(_)))),
        "creating a task whose input the store refused gave {created:?}"
    );
    // The caller was told no task was made: none lives on (idle, subscribed to events, its
    // id unknown to the caller). Its record stays readable, as a deleted task's does.
    let tasks = engine.list_tasks(None, None, None).unwrap();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    for task in &tasks {
        assert_eq!(
            (task.status(), task.reason),
            (Status::Terminated, Some(Reason::Deleted)),
            "task `{}` outlived its failed creation",
            task.id
        );
    }
}
