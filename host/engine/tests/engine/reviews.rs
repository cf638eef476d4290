//! `review(user)`: a task waits for a decision, in this process or across a restart.

use std::sync::Arc;
use std::time::Duration;

use agentmesh_engine::{Decider, Engine, EngineError, Origin, Reason, Run, Status, TaskRecord};
use agentmesh_model::event::{Event, EventKind, EventSource};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::util::{Harness, echo_agent, engine_with_review_timeout, harness, observations};

/// Agent `t/a` on the scripted model, with `capability` (YAML under `capabilities:`).
fn agent(capability: &str) -> String {
    echo_agent(&format!("capabilities:\n{capability}"))
}

/// Decides review `review_id` of task `id` as alice, its reviewer.
async fn decide(engine: &Engine, id: &str, review_id: &str, approve: bool) {
    engine
        .decide_review(id, review_id, approve, Decider::Subject("alice"))
        .await
        .unwrap();
}

/// Every call of `echo` waits for the task's user to approve it.
const REVIEWED_ECHO: &str = "  echo:\n    before:\n      - assert: \"review(context.user.id)\"\n        error_message: Denied.\n";

/// The first call of `echo` in a task waits for the task's user to approve it.
const REVIEWED_FIRST_ECHO: &str = "  echo:\n    before_first:\n      - assert: \"review(context.user.id)\"\n        error_message: Denied first.\n";

/// Only `echo_say` waits for a review; `echo_shout` runs at once.
const REVIEWED_SAY: &str = "  echo:\n    before:\n      - assert: \"review(context.user.id)\"\n        match: say\n        error_message: Denied.\n";

const SAY_EVIL: &str = "responses:
  - tool_calls:
      - {name: echo_say, arguments: {text: hi, owner: evil}}
  - text: done
";

/// Starts a task of `t/a` for alice and runs it in the background until its call waits in a
/// review; returns the task id, the runner and the review id.
async fn until_review(h: &Harness) -> (String, JoinHandle<Arc<TaskRecord>>, String) {
    let (id, runner) = run_for_alice(&h.engine, "t/a").await;
    let review_id = pending_review(&h.engine, &id).await;
    (id, runner, review_id)
}

/// Starts a task of `agent` for alice, told `go`, and runs it in the background; returns its
/// id and the runner.
async fn run_for_alice(engine: &Engine, agent: &str) -> (String, JoinHandle<Arc<TaskRecord>>) {
    let task = engine
        .create_task(
            agentmesh_engine::NewTask {
                agent: agent.into(),
                input: Some(json!({"message": "go"})),
                user: agentmesh_engine::UserRef {
                    id: "alice".into(),
                    email: None,
                },
            },
            Run::Caller,
        )
        .await
        .unwrap();
    let (engine, id) = (engine.clone(), task.id.clone());
    let runner = tokio::spawn(async move { engine.run_until_idle(&id).await.unwrap() });
    (task.id, runner)
}

/// Waits until task `id` waits in a review by alice; returns the review id.
async fn pending_review(engine: &Engine, id: &str) -> String {
    for _ in 0..1000 {
        let record = engine.task(id).unwrap();
        if let Some(r) = record.pending_review.clone() {
            assert_eq!(record.status(), Status::Waiting);
            assert_eq!(r.reviewer, "alice");
            return r.review_id;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the task never waited for a review");
}

/// Stops the host while task `id` waits in a review (its runner and engine are dropped, as
/// in a crash) and starts a new engine on the same config and data dir, with reviews timing
/// out after `review_timeout`; returns the engine after [`Engine::recover`].
async fn restart(
    h: Harness,
    runner: JoinHandle<Arc<TaskRecord>>,
    review_timeout: Option<Duration>,
) -> (tempfile::TempDir, Engine) {
    runner.abort();
    assert!(runner.await.unwrap_err().is_cancelled());
    let Harness { dir, engine } = h;
    drop(engine);
    let engine = engine_with_review_timeout(dir.path(), review_timeout);
    engine.recover().unwrap();
    (dir, engine)
}

/// Waits until task `id` is idle or terminated; returns its record.
async fn settled(engine: &Engine, id: &str) -> TaskRecord {
    for _ in 0..2500 {
        let record = engine.task(id).unwrap();
        if matches!(record.status(), Status::Idle | Status::Terminated) && !engine.is_busy(id) {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    panic!("task `{id}` never settled: {:?}", engine.task(id).unwrap());
}

/// The kinds of `events`, with the value of each status update.
fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.kind {
            EventKind::ConversationStateUpdateEvent { key, value } if key == "status" => {
                format!("status {}", value.as_str().unwrap_or_default())
            }
            kind => kind.name().to_owned(),
        })
        .collect()
}

/// The decisions in `events`: (approve, decided_by).
fn decisions(events: &[Event]) -> Vec<(bool, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ReviewDecisionEvent {
                approve,
                decided_by,
                ..
            } => Some((*approve, decided_by.clone())),
            _ => None,
        })
        .collect()
}

/// How many results each call id got (every call must get exactly one).
fn results_per_call(events: &[Event]) -> Vec<(String, usize)> {
    let mut calls: Vec<(String, usize)> = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::ActionEvent { tool_call, .. } => calls.push((tool_call.id.clone(), 0)),
            EventKind::ObservationEvent { tool_call_id, .. }
            | EventKind::UserRejectObservation { tool_call_id, .. }
            | EventKind::AgentErrorEvent {
                tool_call_id: Some(tool_call_id),
                ..
            } => {
                if let Some(c) = calls.iter_mut().find(|(id, _)| id == tool_call_id) {
                    c.1 += 1;
                }
            }
            _ => {}
        }
    }
    calls
}

/// The errors reported for calls (`interrupted`, `not run`).
fn call_errors(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentErrorEvent {
                tool_call_id: Some(_),
                error,
                ..
            } => Some(error.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_review_suspends_the_task_until_a_decision_arrives() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    decide(&h.engine, &id, &review_id, true).await;
    let done = runner.await.unwrap();
    assert_eq!(done.status(), Status::Idle);
    assert_eq!(done.capabilities["echo_say"].count_successful, 1);
    // Deciding again: nobody waits for the review any more.
    let again = h
        .engine
        .decide_review(&id, &review_id, true, Decider::Admin("alice"))
        .await;
    assert!(matches!(again, Err(EngineError::NotFound(_))), "{again:?}");
}

#[tokio::test]
async fn only_the_named_reviewer_or_an_admin_decides_and_is_recorded() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    let pending = h.engine.task(&id).unwrap().pending_review.unwrap();
    assert_eq!(
        pending.step,
        json!({"action": "say", "phase": "before", "expression": "review(context.user.id)"})
    );
    assert_eq!(pending.subject["input"]["text"], "hi");
    let refused = h
        .engine
        .decide_review(&id, &review_id, true, Decider::Subject("mallory"))
        .await;
    assert!(
        matches!(refused, Err(EngineError::Forbidden(_))),
        "{refused:?}"
    );
    // The refused attempt changed nothing: the review still waits, and its reviewer decides.
    assert_eq!(h.engine.task(&id).unwrap().status(), Status::Waiting);
    decide(&h.engine, &id, &review_id, true).await;
    runner.await.unwrap();
    let events = h.engine.events(&id, 0).unwrap();
    assert_eq!(decisions(&events), vec![(true, "alice".to_owned())]);
}

#[tokio::test]
async fn a_denied_review_blocks_the_call_and_the_turn_goes_on() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    decide(&h.engine, &id, &review_id, false).await;
    let done = runner.await.unwrap();
    assert_eq!(done.status(), Status::Idle);
    assert_eq!(done.capabilities["echo_say"].count_restricted, 1);
    assert_eq!(done.last_output_text().as_deref(), Some("done"));
    let events = h.engine.events(&id, 0).unwrap();
    assert_eq!(observations(&events), [json!({"rejected": "Denied."})]);
    assert_eq!(decisions(&events), [(false, "alice".to_owned())]);
}

#[tokio::test]
async fn an_interrupt_ends_a_review_and_keeps_what_the_turn_did() {
    let script = "responses:
  - tool_calls:
      - {name: echo_shout, arguments: {text: one}}
      - {name: echo_say, arguments: {text: two}}
      - {name: echo_shout, arguments: {text: three}}
  - text: after the interrupt
";
    let h = harness(&agent(REVIEWED_SAY), script);
    let (id, runner, review_id) = until_review(&h).await;
    // The interrupt ends the wait at once, before anyone decides: the reviewed call is denied
    // and the turn stops there, keeping the call that ran before it.
    tokio::time::timeout(Duration::from_secs(10), h.engine.interrupt(&id))
        .await
        .expect("the interrupt waited for a decision")
        .unwrap();
    runner.await.unwrap();
    let record = h.engine.task(&id).unwrap();
    assert_eq!(record.status(), Status::Idle);
    assert_eq!(record.pending_review, None);
    assert_eq!(record.capabilities["echo_shout"].count_successful, 1);
    assert_eq!(record.capabilities["echo_say"].count_successful, 0);
    let late = h
        .engine
        .decide_review(&id, &review_id, true, Decider::Admin("alice"))
        .await;
    assert!(matches!(late, Err(EngineError::NotFound(_))), "{late:?}");
    let events = h.events(&record);
    assert_eq!(decisions(&events), [(false, "interrupt".to_owned())]);
    assert_eq!(
        observations(&events),
        [json!({"text": "one!"}), json!({"rejected": "Denied."})]
    );
    assert_eq!(call_errors(&events), ["not run: the task was interrupted"]);
    let at = |kind: &str| events.iter().rposition(|e| e.kind.name() == kind);
    let observed = at("ObservationEvent").expect("the calls' results are in the log");
    let paused = at("PauseEvent").expect("the interrupt is in the log");
    assert!(observed < paused, "{events:?}");
    // The LLM was not asked again: no answer after the calls.
    assert!(
        !events
            .iter()
            .any(|e| e.source == EventSource::Agent && e.kind.name() == "MessageEvent"),
        "{events:?}"
    );
}

#[tokio::test]
async fn an_approval_after_a_restart_resumes_the_call_and_the_turn() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;

    // Still waiting in the same review, nothing reported as interrupted.
    let record = engine.task(&id).unwrap();
    assert_eq!(record.status(), Status::Waiting);
    assert_eq!(
        record.pending_review.as_ref().map(|p| p.review_id.as_str()),
        Some(review_id.as_str())
    );
    assert!(call_errors(&engine.events(&id, 0).unwrap()).is_empty());
    // A runner started for the task (as new input would) leaves it waiting.
    let record = engine.run_until_idle(&id).await.unwrap();
    assert_eq!(record.status(), Status::Waiting);

    let unknown = engine
        .decide_review(&id, "rv_nope", true, Decider::Admin("alice"))
        .await;
    assert!(
        matches!(unknown, Err(EngineError::NotFound(_))),
        "{unknown:?}"
    );
    decide(&engine, &id, &review_id, true).await;
    let again = engine
        .decide_review(&id, &review_id, false, Decider::Admin("bob"))
        .await;
    assert!(matches!(again, Err(EngineError::NotFound(_))), "{again:?}");

    let done = settled(&engine, &id).await;
    assert_eq!(done.status(), Status::Idle);
    assert_eq!(done.last_output_text().as_deref(), Some("done"));
    assert_eq!(done.capabilities["echo_say"].count_successful, 1);
    // The call was counted once, when it first ran.
    assert_eq!(done.tool_calls, 1);
    assert_eq!(done.pending_review, None);
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(
        observations(&events),
        [json!({"owner": "evil", "text": "hi"})]
    );
    assert_eq!(decisions(&events), [(true, "alice".to_owned())]);
    assert!(call_errors(&events).is_empty(), "{events:?}");
    assert_eq!(results_per_call(&events)[0].1, 1);
    let kinds = kinds(&events);
    let tail: Vec<&str> = kinds
        .iter()
        .skip_while(|k| *k != "ReviewRequestEvent")
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "ReviewRequestEvent",
            "status waiting",
            "ConversationStateUpdateEvent",
            "ReviewDecisionEvent",
            "status running",
            "ObservationEvent",
            "MessageEvent",
            "status idle",
        ],
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_denial_after_a_restart_blocks_the_call_and_the_turn_goes_on() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    decide(&engine, &id, &review_id, false).await;
    let done = settled(&engine, &id).await;
    assert_eq!(done.status(), Status::Idle);
    assert_eq!(done.last_output_text().as_deref(), Some("done"));
    assert_eq!(done.capabilities["echo_say"].count_restricted, 1);
    assert_eq!(done.capabilities["echo_say"].count_successful, 0);
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(observations(&events), [json!({"rejected": "Denied."})]);
    assert_eq!(decisions(&events), [(false, "alice".to_owned())]);
    // The review was not asked again.
    let requests = events
        .iter()
        .filter(|e| e.kind.name() == "ReviewRequestEvent")
        .count();
    assert_eq!(requests, 1);
}

#[tokio::test]
async fn a_denial_after_a_restart_of_a_before_first_review_blocks_the_call() {
    let h = harness(&agent(REVIEWED_FIRST_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    decide(&engine, &id, &review_id, false).await;
    let done = settled(&engine, &id).await;
    assert_eq!(done.capabilities["echo_say"].count_restricted, 1);
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(
        observations(&events),
        [json!({"rejected": "Denied first."})]
    );
    assert_eq!(done.last_output_text().as_deref(), Some("done"));
}

#[tokio::test]
async fn calls_answered_before_a_restart_do_not_run_again() {
    let script = "responses:
  - text: Three calls.
    tool_calls:
      - {name: echo_shout, arguments: {text: one}}
      - {name: echo_say, arguments: {text: two}}
      - {name: echo_shout, arguments: {text: three}}
  - text: done
";
    let h = harness(&agent(REVIEWED_SAY), script);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    decide(&engine, &id, &review_id, true).await;
    let done = settled(&engine, &id).await;
    assert_eq!(done.last_output_text().as_deref(), Some("done"));
    assert_eq!(done.capabilities["echo_shout"].count_successful, 2);
    assert_eq!(done.capabilities["echo_say"].count_successful, 1);
    assert_eq!(done.tool_calls, 3);
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(
        observations(&events),
        [
            json!({"text": "one!"}),
            json!({"owner": "nobody", "text": "two"}),
            json!({"text": "three!"}),
        ]
    );
    let results = results_per_call(&events);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|(_, n)| *n == 1), "{results:?}");
}

#[tokio::test]
async fn a_review_whose_timeout_passed_while_the_host_was_down_is_a_denial() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The new host's timeout is shorter than the time since the request.
    let (_dir, engine) = restart(h, runner, Some(Duration::from_millis(20))).await;
    // Decided at recovery, not by a timer afterwards.
    assert_eq!(engine.task(&id).unwrap().pending_review, None);
    let done = settled(&engine, &id).await;
    assert_eq!(done.status(), Status::Idle);
    assert_eq!(done.last_output_text().as_deref(), Some("done"));
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(observations(&events), [json!({"rejected": "Denied."})]);
    assert_eq!(decisions(&events), [(false, "timeout".to_owned())]);
    let late = engine
        .decide_review(&id, &review_id, true, Decider::Admin("alice"))
        .await;
    assert!(matches!(late, Err(EngineError::NotFound(_))), "{late:?}");
}

#[tokio::test]
async fn a_review_times_out_after_a_restart_counted_from_its_request() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, _review_id) = until_review(&h).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_millis(1200))).await;
    assert_eq!(engine.task(&id).unwrap().status(), Status::Waiting);
    let done = settled(&engine, &id).await;
    assert_eq!(done.last_output_text().as_deref(), Some("done"));
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(observations(&events), [json!({"rejected": "Denied."})]);
    assert_eq!(decisions(&events), [(false, "timeout".to_owned())]);
    // Counted from the request, not from the restart (a second later).
    let at = |kind: &str| {
        events
            .iter()
            .find(|e| e.kind.name() == kind)
            .map(|e| chrono::DateTime::parse_from_rfc3339(&e.timestamp).unwrap())
            .unwrap()
    };
    let waited = at("ReviewDecisionEvent") - at("ReviewRequestEvent");
    assert!(
        (1200..2000).contains(&waited.num_milliseconds()),
        "{waited:?}"
    );
}

#[tokio::test]
async fn input_sent_while_a_review_waits_across_a_restart_runs_after_the_turn() {
    let script = "responses:
  - tool_calls:
      - {name: echo_say, arguments: {text: hi}}
  - text: done
  - text: second answer
";
    let h = harness(&agent(REVIEWED_ECHO), script);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    engine
        .submit(
            &id,
            json!({"message": "and then"}),
            Origin::User,
            Run::Background,
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(engine.task(&id).unwrap().status(), Status::Waiting);
    decide(&engine, &id, &review_id, true).await;
    let done = settled(&engine, &id).await;
    let texts: Vec<String> = done
        .outputs
        .iter()
        .map(|o| o["message"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["done", "second answer"]);
}

#[tokio::test]
async fn deleting_a_task_waiting_across_a_restart_ends_its_review() {
    let h = harness(&agent(REVIEWED_ECHO), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    engine.delete_task(&id).await.unwrap();
    let record = engine.task(&id).unwrap();
    assert_eq!(record.status(), Status::Terminated);
    assert_eq!(record.reason, Some(Reason::Deleted));
    assert_eq!(record.pending_review, None);
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(call_errors(&events), ["not run: the task ended"]);
    let late = engine
        .decide_review(&id, &review_id, true, Decider::Admin("alice"))
        .await;
    assert!(matches!(late, Err(EngineError::NotFound(_))), "{late:?}");
    assert_eq!(
        engine.task(&id).unwrap().capabilities.get("echo_say"),
        None,
        "the call never ran"
    );
}

#[tokio::test]
async fn interrupting_a_task_waiting_across_a_restart_ends_its_review() {
    let script = "responses:
  - tool_calls:
      - {name: echo_say, arguments: {text: hi}}
  - text: after the interrupt
";
    let h = harness(&agent(REVIEWED_ECHO), script);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    engine.interrupt(&id).await.unwrap();
    let record = engine.task(&id).unwrap();
    assert_eq!(record.status(), Status::Idle);
    assert_eq!(record.pending_review, None);
    let late = engine
        .decide_review(&id, &review_id, true, Decider::Admin("alice"))
        .await;
    assert!(matches!(late, Err(EngineError::NotFound(_))), "{late:?}");
    // The task takes new input; the LLM sees the call answered.
    engine
        .submit(&id, json!({"message": "go on"}), Origin::User, Run::Caller)
        .await
        .unwrap();
    let done = engine.run_until_idle(&id).await.unwrap();
    assert_eq!(
        done.last_output_text().as_deref(),
        Some("after the interrupt")
    );
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(call_errors(&events), ["not run: the task was interrupted"]);
    assert!(results_per_call(&events).iter().all(|(_, n)| *n == 1));
}

#[tokio::test]
async fn a_review_in_an_after_step_ends_at_a_restart() {
    // The action ran before the review: running the call again would repeat it.
    let reviewed_after = "  echo:\n    after:\n      - assert: \"review(context.user.id)\"\n        error_message: Denied.\n";
    let h = harness(&agent(reviewed_after), SAY_EVIL);
    let (id, runner, review_id) = until_review(&h).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    let record = engine.task(&id).unwrap();
    assert_eq!(record.status(), Status::Idle);
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(
        call_errors(&events),
        ["interrupted: the host restarted during this call; it was not re-run"]
    );
    let late = engine
        .decide_review(&id, &review_id, true, Decider::Admin("alice"))
        .await;
    assert!(matches!(late, Err(EngineError::NotFound(_))), "{late:?}");
}

/// `t/boss` delegating to `t/a`, whose call waits in a review that never times out: the
/// engine, the parent's id and its runner, and the child's id once it waits.
async fn waiting_child(
    dir: &std::path::Path,
) -> (Engine, String, JoinHandle<Arc<TaskRecord>>, String) {
    let boss = "kind: commonagents.info/v1beta2/agent
namespace: t
name: boss
description: Delegates.
prompt: Delegate.
model: scripted/boss.yaml
capabilities:
  a: \"*\"
";
    agentmesh_testkit::engine::write_config(
        dir,
        &format!("{}---\n{boss}", agent(REVIEWED_ECHO)),
        &[
            ("script.yaml", SAY_EVIL),
            (
                "boss.yaml",
                "responses:\n  - tool_calls: [{name: a, arguments: {message: go}}]\n  - text: done\n",
            ),
        ],
    );
    let engine = engine_with_review_timeout(dir, None);
    let (parent, runner) = run_for_alice(&engine, "t/boss").await;
    for _ in 0..1000 {
        let waiting = engine.list_tasks(Some("t/a"), Some(Status::Waiting), None);
        if let Some(t) = waiting.unwrap().into_iter().next() {
            return (engine, parent, runner, t.id);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the child never waited in its review");
}

/// Checks that task `child`'s review ended unanswered and its parent's stop stopped it:
/// interrupted it, or deleted it with its parent (`deleted`).
fn stopped_child(engine: &Engine, child: &str, deleted: bool) {
    let child = engine.task(child).unwrap();
    assert_eq!(child.pending_review, None, "{child:?}");
    if deleted {
        assert_eq!(child.status(), Status::Terminated, "{child:?}");
        assert_eq!(child.reason, Some(Reason::Deleted), "{child:?}");
    } else {
        assert_eq!(child.status(), Status::Idle, "{child:?}");
    }
    assert!(child.interrupted, "its parent's stop stopped it: {child:?}");
    assert!(child.subscriptions.is_empty(), "{child:?}");
    assert_eq!(
        child.capabilities["echo_say"].count_successful, 0,
        "the reviewed call never ran"
    );
}

#[tokio::test]
async fn deleting_a_parent_ends_the_review_its_delegated_child_waits_in() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, parent, runner, child) = waiting_child(dir.path()).await;
    tokio::time::timeout(Duration::from_secs(10), engine.delete_task(&parent))
        .await
        .expect("the deletion waited for the child's review")
        .unwrap();
    runner.await.unwrap();
    assert_eq!(engine.task(&parent).unwrap().reason, Some(Reason::Deleted));
    stopped_child(&engine, &child, true);
}

#[tokio::test]
async fn interrupting_a_parent_ends_the_review_its_delegated_child_waits_in() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, parent, runner, child) = waiting_child(dir.path()).await;
    tokio::time::timeout(Duration::from_secs(10), engine.interrupt(&parent))
        .await
        .expect("the interrupt waited for the child's review")
        .unwrap();
    runner.await.unwrap();
    let parent = engine.task(&parent).unwrap();
    assert_eq!(parent.status(), Status::Idle, "{parent:?}");
    assert!(parent.interrupted, "{parent:?}");
    assert!(
        parent.outputs.is_empty(),
        "the parent's turn stopped: {parent:?}"
    );
    stopped_child(&engine, &child, false);
}

/// Waits until task `id` waits in a review other than those in `asked`; returns its id.
async fn next_review(engine: &Engine, id: &str, asked: &[&str]) -> String {
    for _ in 0..1000 {
        let pending = engine.task(id).unwrap().pending_review.clone();
        if let Some(r) = pending.filter(|r| !asked.contains(&r.review_id.as_str())) {
            return r.review_id;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the task never waited for another review");
}

/// A tool `t/gate` whose one action, `check`, asks alice (`review('alice')`).
const GATE: &str = "kind: commonagents.info/v1beta2/tool
namespace: t
name: gate
description: Asks alice.
actions:
  - name: check
    description: Check.
    execute:
      cel: {expression: \"review('alice')\"}
---
";

#[tokio::test]
async fn a_denial_after_a_restart_is_not_answered_by_an_invoked_tools_approval() {
    // The call's `before` invokes `gate:check`, whose expression asks alice (anew each time
    // the tool runs), then asks alice itself (a review that waits across a restart).
    let steps = "  echo:\n    before:\n      - invoke: \"gate:check\"\n      - assert: \"review('alice')\"\n        error_message: Denied.\n";
    let h = harness(&format!("{GATE}{}", agent(steps)), SAY_EVIL);
    let (id, runner) = run_for_alice(&h.engine, "t/a").await;
    let gate = pending_review(&h.engine, &id).await;
    decide(&h.engine, &id, &gate, true).await;
    let step = next_review(&h.engine, &id, &[&gate]).await;
    let (_dir, engine) = restart(h, runner, Some(Duration::from_secs(5))).await;
    decide(&engine, &id, &step, false).await;
    // The call runs again from its start: the tool asks alice anew, and she approves.
    let again = next_review(&engine, &id, &[&gate, &step]).await;
    decide(&engine, &id, &again, true).await;
    let done = settled(&engine, &id).await;
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(
        observations(&events),
        [json!({"rejected": "Denied."})],
        "alice denied the step's review; the tool's approvals are not that decision"
    );
    assert_eq!(done.capabilities["echo_say"].count_successful, 0);
}
