//! A delivery the host fails on is not accepted: when a matched task's admission cannot be
//! decided (its record cannot be read), the delivery fails as a whole — nothing is queued,
//! its id is not remembered — so that the sender's retry reaches every task. The store here
//! is sled behind a function that refuses the calls the test names.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_engine::{Engine, EngineError, NewTask, Origin, Run, UserRef, WebhookError};
use agentmesh_model::delivery::{Headers, Inbound};
use agentmesh_routing::{EventRouter, WebhookOutcome};
use agentmesh_store::StoreError;
use agentmesh_testkit::engine::{engine_at, engine_through, write_config};
use agentmesh_testkit::fixtures::scripted_agent;
use serde_json::json;

/// While set, the store refuses every read of a task record.
static RECORD_READS_FAIL: AtomicBool = AtomicBool::new(false);

fn faults(call: &'static str, f: &mut dyn FnMut()) {
    if !(call == "record" && RECORD_READS_FAIL.load(Ordering::SeqCst)) {
        f();
    }
}

/// A tool `t/hook` whose event `ping` arrives unsigned by webhook, and an agent `t/a` that
/// hears it (every task of it subscribes at creation).
fn config(dir: &std::path::Path) {
    let tool = "kind: commonagents.info/v1beta2/tool
namespace: t
name: hook
description: Pings.
actions:
  - name: noop
    description: Nothing.
    execute:
      cel: {expression: \"{}\"}
events:
  - name: ping
    message: \"ping {event.payload.n}\"
    receive:
      webhook: {}
";
    let agent = scripted_agent("t/a", "capabilities:\n  hook: \"*\"\n");
    write_config(
        dir,
        &format!("{tool}---\n{agent}"),
        &[("script.yaml", "responses:\n  - text: Heard.\n")],
    );
}

async fn new_task(engine: &Engine) -> String {
    let new = NewTask {
        agent: "t/a".into(),
        input: None,
        user: UserRef {
            id: "user:alice".into(),
            email: None,
        },
    };
    engine.create_task(new, Run::Background).await.unwrap().id
}

fn ping(id: &str) -> Headers {
    [("x-delivery-id", id)].into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_whose_admission_the_store_fails_is_refused_whole_and_its_retry_reaches_every_task()
 {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path());
    // Two subscribed tasks, written; the host restarts, so neither record is in memory.
    let (a, b) = {
        let engine = engine_at(dir.path(), None);
        (new_task(&engine).await, new_task(&engine).await)
    };
    let engine = engine_through(dir.path(), faults);
    let router = EventRouter::new(engine.clone()).unwrap();
    engine.recover().unwrap();
    // Task `a` runs a turn (and its record stays in memory); `b` is not read.
    engine
        .submit(&a, json!({"message": "hello"}), Origin::User, Run::Caller)
        .await
        .unwrap();
    engine.run_until_idle(&a).await.unwrap();
    let body = br#"{"n": 1}"#;
    let delivery = |headers| Inbound {
        headers,
        body: &body[..],
    };

    RECORD_READS_FAIL.store(true, Ordering::SeqCst);
    let headers = ping("d-1");
    let failed = router
        .deliver_tool_webhook("t/hook", delivery(&headers))
        .await;
    RECORD_READS_FAIL.store(false, Ordering::SeqCst);
    assert!(
        matches!(
            &failed,
            Err(WebhookError::Engine(EngineError::Store(StoreError::Io(e)))) if e.contains("record")
        ),
        "a delivery task `{b}` could not admit was answered {failed:?}"
    );
    for task in [&a, &b] {
        let queued = engine.queued_inputs(task, 10).unwrap();
        assert!(
            queued.is_empty(),
            "the refused delivery queued input on `{task}`: {queued:?}"
        );
    }

    // The sender's retry of the same delivery reaches both tasks.
    let retried = router
        .deliver_tool_webhook("t/hook", delivery(&headers))
        .await
        .unwrap();
    let WebhookOutcome::Accepted(mut tasks) = retried else {
        panic!("the retry was answered {retried:?}");
    };
    tasks.sort();
    let mut both = vec![a, b];
    both.sort();
    assert_eq!(tasks, both);
}
