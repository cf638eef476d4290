//! A fire the host fails to queue is not a fire: the task it started is deleted again, and a
//! trigger past its `ttl` keeps its final fire for the sender's retry. The store here is sled
//! behind a function that refuses the calls the test names.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use agentmesh_engine::{EngineError, Reason, Run, Status, WebhookError};
use agentmesh_model::delivery::{Headers, Inbound};
use agentmesh_secrets::signature::sign_github;
use agentmesh_store::StoreError;
use agentmesh_testkit::engine::{SCRIPTED_AGENT, engine_through, write_config};
use agentmesh_triggers::{SourceDelivery, Triggers};

/// While set, the store refuses to queue input.
static QUEUE_WRITES_FAIL: AtomicBool = AtomicBool::new(false);

fn faults(call: &'static str, f: &mut dyn FnMut()) {
    let queuing = matches!(call, "queue_deferred" | "queue_durably");
    if !(queuing && QUEUE_WRITES_FAIL.load(Ordering::SeqCst)) {
        f();
    }
}

const SECRET: &str = "host failures secret";

/// A GitHub-signed delivery of `body` with id `id`.
fn signed(id: &str, body: &[u8]) -> Headers {
    let signature = sign_github(SECRET, body);
    [
        ("X-GitHub-Event", "issues"),
        ("X-GitHub-Delivery", id),
        ("X-Hub-Signature-256", signature.as_str()),
    ]
    .into_iter()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_the_door_cannot_queue_deletes_its_task_and_keeps_the_final_fire() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = format!(
        "{SCRIPTED_AGENT}---
kind: agentmesh/v1/host
sources:
  hooks: {{signature: github, secret: \"{SECRET}\"}}
---
kind: commonagents.info/v1beta2/trigger
namespace: t
name: once
agent: a
owner: user:ops@example.com
source: {{type: hooks}}
message: Go.
ttl: 1s
"
    );
    write_config(
        dir.path(),
        &manifests,
        &[("script.yaml", "responses:\n  - text: Gone.\n")],
    );
    let engine = engine_through(dir.path(), faults);
    let triggers = Triggers::new(engine.clone()).unwrap();
    triggers.start().await.unwrap();
    // Its ttl passes: the next fire is its final one.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let body = br#"{"action": "opened"}"#;
    let deliver = async |id: &str| {
        let headers = signed(id, body);
        let delivery = Inbound {
            headers: &headers,
            body,
        };
        triggers.deliver_source_webhook("hooks", delivery).await
    };

    QUEUE_WRITES_FAIL.store(true, Ordering::SeqCst);
    let failed = deliver("d-1").await;
    QUEUE_WRITES_FAIL.store(false, Ordering::SeqCst);
    assert!(
        matches!(
            &failed,
            Err(WebhookError::Engine(EngineError::Store(StoreError::Io(_))))
        ),
        "a delivery the door could not queue was answered {failed:?}"
    );
    // The task the fire started for the input the door could not queue does not live on.
    for task in engine.list_tasks(None, None, None).unwrap() {
        assert_eq!(
            (task.status(), task.reason),
            (Status::Terminated, Some(Reason::Deleted)),
            "task `{}` outlived the fire that failed",
            task.id
        );
    }
    let status = &triggers.trigger("t/once").unwrap().status;
    assert!(
        !status.expired,
        "the trigger expired on a fire that queued nothing: {status:?}"
    );

    // The sender's retry is the final fire; after it the trigger has expired.
    let retried = deliver("d-1").await.unwrap();
    let SourceDelivery::Accepted { tasks, .. } = &retried else {
        panic!("the retry was answered {retried:?}");
    };
    assert_eq!(tasks.len(), 1, "the retry fired {tasks:?}");
    let answered = async {
        while engine.task(&tasks[0]).unwrap().outputs.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), answered)
        .await
        .expect("the final fire's task never answered its input");
    assert!(triggers.trigger("t/once").unwrap().status.expired);
    let later = deliver("d-2").await.unwrap();
    assert!(
        matches!(&later, SourceDelivery::Accepted { tasks, .. } if tasks.is_empty()),
        "a delivery after the final fire was answered {later:?}"
    );
}

/// While set, the store refuses to queue input (for the wakeup test's engine).
static WAKEUP_QUEUE_FAILS: AtomicBool = AtomicBool::new(false);
/// How many calls it refused.
static WAKEUP_QUEUE_REFUSED: AtomicUsize = AtomicUsize::new(0);

fn wakeup_faults(call: &'static str, f: &mut dyn FnMut()) {
    let queuing = matches!(call, "queue_deferred" | "queue_durably");
    if queuing && WAKEUP_QUEUE_FAILS.load(Ordering::SeqCst) {
        WAKEUP_QUEUE_REFUSED.fetch_add(1, Ordering::SeqCst);
    } else {
        f();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wakeup_whose_fire_the_store_refuses_fires_once_the_store_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = "responses:
  - tool_calls:
      - {name: request_wakeup, arguments: {when: {kind: delay_ms, value: 300}, prompt: Wake up, reason: check}}
  - text: Sleeping.
  - text: Awake.
";
    write_config(dir.path(), SCRIPTED_AGENT, &[("script.yaml", script)]);
    let engine = engine_through(dir.path(), wakeup_faults);
    let triggers = Triggers::new(engine.clone()).unwrap();
    triggers.start().await.unwrap();
    let running = tokio::spawn(triggers.clone().run());
    let new = agentmesh_testkit::engine::new_task("t/a", "Sleep.");
    let task = engine.create_task(new, Run::Caller).await.unwrap();
    engine.run_until_idle(&task.id).await.unwrap();

    // The wakeup comes due while the store refuses to queue its input.
    WAKEUP_QUEUE_FAILS.store(true, Ordering::SeqCst);
    let refused = async {
        while WAKEUP_QUEUE_REFUSED.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let waited = tokio::time::timeout(Duration::from_secs(10), refused).await;
    WAKEUP_QUEUE_FAILS.store(false, Ordering::SeqCst);
    waited.expect("the wakeup never tried to queue its input");

    // Once the store takes writes again, the wakeup fires: it was not lost.
    let woken = async {
        while engine.task(&task.id).unwrap().outputs.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let woke = tokio::time::timeout(Duration::from_secs(20), woken).await;
    running.abort();
    woke.expect("the wakeup never fired after the store refused its first fire");
}
