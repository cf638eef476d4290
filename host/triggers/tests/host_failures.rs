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
use agentmesh_testkit::engine::{SCRIPTED_AGENT, engine_at, engine_through, write_config};
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

/// An agent `t/a` (answering `Done.`) and a trigger `t/NAME` of it with `extra` (a line of
/// the manifest), fired by source `hooks`, whose deliveries GitHub signs with [`SECRET`].
fn hooked_trigger(dir: &std::path::Path, name: &str, extra: &str) {
    let manifests = format!(
        "{SCRIPTED_AGENT}---
kind: agentmesh/v1/host
sources:
  hooks: {{signature: github, secret: \"{SECRET}\"}}
---
kind: commonagents.info/v1beta2/trigger
namespace: t
name: {name}
agent: a
owner: user:ops@example.com
source: {{type: hooks}}
message: Go.
{extra}
"
    );
    let script = "responses:\n  - text: Done.\n";
    write_config(dir, &manifests, &[("script.yaml", script)]);
}

/// Delivers an `opened` event to source `hooks`, signed, with delivery id `id`.
async fn deliver(triggers: &Triggers, id: &str) -> Result<SourceDelivery, WebhookError> {
    let body = br#"{"action": "opened"}"#;
    let headers = signed(id, body);
    let delivery = Inbound {
        headers: &headers,
        body,
    };
    triggers.deliver_source_webhook("hooks", delivery).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_the_door_cannot_queue_deletes_its_task_and_keeps_the_final_fire() {
    let dir = tempfile::tempdir().unwrap();
    hooked_trigger(dir.path(), "once", "ttl: 1s");
    let engine = engine_through(dir.path(), faults);
    let triggers = Triggers::new(engine.clone()).unwrap();
    triggers.start().await.unwrap();
    // Its ttl passes: the next fire is its final one.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let deliver = async |id: &str| deliver(&triggers, id).await;

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

/// The script of a task that asks for a wakeup `delay_ms` from now, then says it sleeps, and,
/// woken, that it is awake.
fn wakeup_script(delay_ms: u64) -> String {
    format!(
        "responses:
  - tool_calls:
      - {{name: request_wakeup, arguments: {{when: {{kind: delay_ms, value: {delay_ms}}}, prompt: Wake up, reason: check}}}}
  - text: Sleeping.
  - text: Awake.
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wakeup_whose_fire_the_store_refuses_fires_once_the_store_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = wakeup_script(300);
    write_config(dir.path(), SCRIPTED_AGENT, &[("script.yaml", &script)]);
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

/// While set, the store refuses every read of host state after the first (a fire's reads:
/// its trigger's status, then its fire counts).
static COUNT_READS_FAIL: AtomicBool = AtomicBool::new(false);
/// The reads of host state since it was set.
static STATE_READS: AtomicUsize = AtomicUsize::new(0);

fn count_faults(call: &'static str, f: &mut dyn FnMut()) {
    let refused = call == "state_value"
        && COUNT_READS_FAIL.load(Ordering::SeqCst)
        && STATE_READS.fetch_add(1, Ordering::SeqCst) >= 1;
    if !refused {
        f();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_whose_throttle_count_cannot_be_read_fails_rather_than_pass_it() {
    let dir = tempfile::tempdir().unwrap();
    hooked_trigger(dir.path(), "limited", "throttle: {max_per_hour: 1}");
    // The trigger's one fire of the hour, on a host that then restarts.
    {
        let triggers = Triggers::new(engine_at(dir.path(), None)).unwrap();
        triggers.start().await.unwrap();
        let first = deliver(&triggers, "d-1").await.unwrap();
        assert!(
            matches!(&first, SourceDelivery::Accepted { tasks, .. } if tasks.len() == 1),
            "{first:?}"
        );
    }
    let engine = engine_through(dir.path(), count_faults);
    let triggers = Triggers::new(engine.clone()).unwrap();
    triggers.start().await.unwrap();

    // Its count cannot be read: the fire fails (the sender retries), it does not pass.
    COUNT_READS_FAIL.store(true, Ordering::SeqCst);
    let unread = deliver(&triggers, "d-2").await;
    COUNT_READS_FAIL.store(false, Ordering::SeqCst);
    assert!(
        matches!(
            &unread,
            Err(WebhookError::Engine(EngineError::Store(StoreError::Io(e)))) if e.contains("state_value")
        ),
        "a fire whose throttle count could not be read was answered {unread:?}"
    );
    // Read again, the count holds: the throttle drops the next fire.
    let next = deliver(&triggers, "d-3").await.unwrap();
    assert_eq!(
        next,
        SourceDelivery::Accepted {
            tasks: Vec::new(),
            dropped: 1
        }
    );
    assert_eq!(engine.list_tasks(None, None, None).unwrap().len(), 1);
}

/// While set, the store refuses every read of a task record.
static RECORD_READS_FAIL: AtomicBool = AtomicBool::new(false);

fn record_faults(call: &'static str, f: &mut dyn FnMut()) {
    if !(call == "record" && RECORD_READS_FAIL.load(Ordering::SeqCst)) {
        f();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wakeup_whose_task_cannot_be_read_at_start_is_kept_and_fires() {
    let dir = tempfile::tempdir().unwrap();
    let script = wakeup_script(1500);
    write_config(dir.path(), SCRIPTED_AGENT, &[("script.yaml", &script)]);
    // The task asks for its wakeup; the host restarts before it is due.
    let task = {
        let engine = engine_at(dir.path(), None);
        let _triggers = Triggers::new(engine.clone()).unwrap();
        let new = agentmesh_testkit::engine::new_task("t/a", "Sleep.");
        let task = engine.create_task(new, Run::Caller).await.unwrap();
        engine.run_until_idle(&task.id).await.unwrap();
        task.id
    };
    let engine = engine_through(dir.path(), record_faults);
    let triggers = Triggers::new(engine.clone()).unwrap();
    // The task cannot be read while the wakeups are armed.
    RECORD_READS_FAIL.store(true, Ordering::SeqCst);
    let started = triggers.start().await;
    RECORD_READS_FAIL.store(false, Ordering::SeqCst);
    started.unwrap();
    let pending = triggers.schedules(Some(&task), None).unwrap().wakeups;
    assert_eq!(pending.len(), 1, "the wakeup was dropped: {pending:?}");

    let running = tokio::spawn(triggers.clone().run());
    let woken = async {
        while engine.task(&task).unwrap().outputs.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let woke = tokio::time::timeout(Duration::from_secs(20), woken).await;
    running.abort();
    woke.expect("the wakeup never fired");
}
