//! The JSON of the API's resources (CONTRACT §3), made here from what the engine keeps: the
//! task object (also what `agentmesh run --json` prints), a pending review, a trigger, a
//! schedule and a self-scheduled wakeup.

use std::time::Duration;

use agentmesh_engine::task::rfc3339 as task_time;
use agentmesh_engine::{TaskRecord, WaitingReview};
use agentmesh_timing::clock::rfc3339;
use agentmesh_triggers::{FireStatus, ScheduleView, TriggerView, WakeupRecord};
use serde_json::{Value, json};

/// The task object, with the number of inputs waiting in its queue.
pub fn task(record: &TaskRecord, queue_depth: usize) -> Value {
    let subscriptions: Vec<Value> = record
        .active_subscriptions()
        .iter()
        .map(|s| {
            json!({
                "tool": s.tool,
                "event": s.event,
                "expires_at": s.expires_at(record.last_activity_ms).map(task_time),
            })
        })
        .collect();
    json!({
        "id": record.id,
        "agent": record.agent,
        "owner": record.user.id,
        "status": record.status(),
        "reason": record.reason,
        "created_at": record.created_at,
        "output": record.outputs,
        "exposes": record.exposes,
        "queue_depth": queue_depth,
        "subscriptions": subscriptions,
        "allow_list": record.allow_lists,
    })
}

/// A review as `GET /v1/reviews` lists it.
pub fn review(waiting: &WaitingReview) -> Value {
    let review = &waiting.review;
    json!({
        "task_id": waiting.task_id,
        "agent": waiting.agent,
        "review_id": review.review_id,
        "reviewer": review.reviewer,
        "step": review.step,
        "input": review.subject.get("input").cloned().unwrap_or(Value::Null),
        "output": review.subject.get("output").cloned().unwrap_or(Value::Null),
        "requested_at": task_time(review.requested_ms),
    })
}

/// A trigger with its read-only status.
pub fn trigger(view: &TriggerView) -> Value {
    let t = &view.plan;
    json!({
        "id": t.id(),
        "namespace": t.namespace,
        "name": t.name,
        "agent": t.agent,
        "owner": t.owner,
        "source": {"type": t.source},
        "enabled": t.enabled,
        "throttle": {"max_per_hour": t.max_per_hour},
        "status": fire_status(&view.status, t.ttl),
    })
}

/// A schedule with its status and next tick.
pub fn schedule(view: &ScheduleView) -> Value {
    let s = &view.plan;
    let next = view.next_ms.map(rfc3339);
    let mut status = fire_status(&view.status, s.ttl);
    if let Value::Object(m) = &mut status {
        m.insert("next_trigger_at".into(), json!(next));
    }
    json!({
        "id": s.id(),
        "kind": "schedule",
        "namespace": s.namespace,
        "name": s.name,
        "agent": s.agent,
        "owner": s.owner,
        "enabled": s.enabled && !view.status.revoked && !view.status.expired,
        "cron": s.manifest.cron,
        "timezone": s.manifest.timezone,
        "interval": s.manifest.interval.map(|d| format!("{}ms", d.0.as_millis())),
        "at": s.manifest.at,
        "next_trigger_at": next,
        "status": status,
    })
}

/// A pending wakeup, as `GET /v1/schedules` lists it beside the schedules.
pub fn wakeup(w: &WakeupRecord) -> Value {
    json!({
        "id": w.id,
        "kind": "wakeup",
        "task_id": w.task_id,
        "owner": w.owner,
        "when": w.when,
        "prompt": w.prompt,
        "reason": w.reason,
        "created_at": rfc3339(w.created_ms),
        "next_trigger_at": rfc3339(w.next_ms),
        "expires_at": rfc3339(w.expires_ms),
        "fires": w.fires,
    })
}

/// The read-only status of a trigger or schedule whose lifetime is `ttl`.
fn fire_status(status: &FireStatus, ttl: Option<Duration>) -> Value {
    let mut v = json!({
        "last_triggered_at": status.last_triggered_at,
        "last_task_id": status.last_task_id,
        "total_triggers": status.total_triggers,
        "consecutive_failures": status.consecutive_failures,
        "last_error": status.last_error,
        "dropped": status.dropped,
    });
    if let Value::Object(m) = &mut v {
        if let Some(ttl) = ttl {
            let expires = agentmesh_timing::ttl::expires_at(status.created_ms, ttl);
            m.insert("expires_at".into(), json!(rfc3339(expires)));
        }
        if status.expired {
            m.insert("expired".into(), json!(true));
        }
        if status.revoked {
            m.insert("revoked".into(), json!(true));
        }
    }
    v
}
