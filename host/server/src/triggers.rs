//! Triggers and schedules over HTTP (CONTRACT §3):
//!
//! - `POST /v1/webhooks/sources/{source}`: a delivery for the triggers of a host config
//!   source — 202 accepted (`tasks`: the new task ids) · 200 duplicate delivery · 401 bad or
//!   missing signature or token · 400 not JSON · 413 too large · 404 unknown source;
//! - `POST /v1/triggers/{namespace}/{name}/fire`: 202 `{task_id}` · 401 · 429 throttled
//!   (dropped and recorded) · 404 · 409 disabled, expired or refused by `source.before`;
//! - `GET /v1/triggers`, `GET /v1/triggers/{namespace}/{name}`: triggers with their
//!   read-only status;
//! - `GET /v1/schedules[?task=ID]`, `DELETE /v1/schedules/{id}`: schedules and self-scheduled
//!   wakeups with `next_trigger_at`; delete revokes.
//!
//! The reading and revoking routes use the task API's tokens and roles: an `agent_user` sees
//! only the triggers and schedules it owns and the wakeups of its own tasks.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agentmesh_routing::Inbound;
use agentmesh_triggers::{FireError, SourceDelivery};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{Caller, Role};
use crate::error::{ApiError, ApiPath, ApiQuery, ApiResult, Body};
use crate::metrics::Metrics;
use crate::webhooks::headers_of;
use crate::{AppState, resources};

/// `POST /v1/webhooks/sources/{source}`.
pub async fn source(
    State(state): State<Arc<AppState>>,
    ApiPath(source): ApiPath<String>,
    headers: HeaderMap,
    body: Result<Body, ApiError>,
) -> ApiResult<Response> {
    let metrics = &state.metrics;
    let Body(body) = body.inspect_err(|_| Metrics::inc(&metrics.webhooks_rejected))?;
    let headers = headers_of(&headers);
    let delivery = Inbound {
        headers: &headers,
        body: &body,
    };
    match state
        .triggers()
        .deliver_source_webhook(&source, delivery)
        .await
    {
        Ok(SourceDelivery::Accepted { tasks, dropped }) => {
            Metrics::inc(&metrics.webhooks_accepted);
            if tasks.is_empty() && dropped == 0 {
                Metrics::inc(&metrics.webhooks_unmatched);
            }
            metrics
                .trigger_fires
                .fetch_add(tasks.len() as u64, Ordering::Relaxed);
            metrics
                .trigger_dropped
                .fetch_add(dropped, Ordering::Relaxed);
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"status": "accepted", "tasks": tasks, "dropped": dropped})),
            )
                .into_response())
        }
        Ok(SourceDelivery::Duplicate) => {
            Metrics::inc(&metrics.webhooks_duplicate);
            Ok((StatusCode::OK, Json(json!({"status": "duplicate"}))).into_response())
        }
        Err(e) => Err(crate::webhooks::refused(metrics, e, &source)),
    }
}

/// `POST /v1/triggers/{namespace}/{name}/fire`.
pub async fn fire(
    State(state): State<Arc<AppState>>,
    ApiPath((namespace, name)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let id = format!("{namespace}/{name}");
    let metrics = &state.metrics;
    let headers = headers_of(&headers);
    let delivery = Inbound {
        headers: &headers,
        body: &body,
    };
    match state.triggers().fire_trigger(&id, delivery).await {
        Ok(task_id) => {
            Metrics::inc(&metrics.trigger_fires);
            Ok((StatusCode::ACCEPTED, Json(json!({"task_id": task_id}))).into_response())
        }
        Err(FireError::Duplicate) => {
            Ok((StatusCode::OK, Json(json!({"status": "duplicate"}))).into_response())
        }
        Err(FireError::NotFound(id)) => Err(ApiError::not_found(format!("no trigger `{id}`"))),
        Err(FireError::Unauthorized(why)) => {
            tracing::info!(trigger.id = %id, "API fire refused: {why}");
            Err(ApiError::unauthorized(why))
        }
        Err(FireError::Throttled(why)) => {
            Metrics::inc(&metrics.trigger_dropped);
            Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "throttled",
                why,
            ))
        }
        Err(FireError::Refused(why)) => Err(ApiError::new(StatusCode::CONFLICT, "refused", why)),
        Err(FireError::BadRequest(why)) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            why,
        )),
        Err(FireError::Engine(e)) => Err(e.into()),
    }
}

/// `GET /v1/triggers`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let caller = state.auth().caller(&headers)?;
    Ok(Json(
        json!({ "triggers": trigger_objects(&state, &caller)? }),
    ))
}

/// The triggers the caller may see (its own, for an `agent_user`), as JSON.
pub(crate) fn trigger_objects(state: &AppState, caller: &Caller) -> ApiResult<Vec<Value>> {
    let owner = (caller.role == Role::AgentUser).then_some(caller.subject.as_str());
    Ok(state
        .triggers()
        .triggers(owner)?
        .iter()
        .map(resources::trigger)
        .collect())
}

/// `GET /v1/triggers/{namespace}/{name}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath((namespace, name)): ApiPath<(String, String)>,
) -> ApiResult<Json<Value>> {
    let caller = state.auth().caller(&headers)?;
    let id = format!("{namespace}/{name}");
    let trigger = state.triggers().trigger(&id)?;
    if !caller.may_see(&trigger.plan.owner) {
        return Err(ApiError::not_found(format!("not found: trigger `{id}`")));
    }
    Ok(Json(resources::trigger(&trigger)))
}

/// `GET /v1/schedules` query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulesQuery {
    task: Option<String>,
}

/// `GET /v1/schedules[?task=ID]`.
pub async fn schedules(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<SchedulesQuery>,
) -> ApiResult<Json<Value>> {
    let caller = state.auth().caller(&headers)?;
    let triggers = state.triggers();
    if let Some(task) = &q.task {
        let record = triggers.engine().task(task)?;
        if !caller.may_see(&record.user.id) {
            return Err(ApiError::not_found(format!("not found: task `{task}`")));
        }
    }
    let owner = (caller.role == Role::AgentUser).then_some(caller.subject.as_str());
    let scheduled = triggers.schedules(q.task.as_deref(), owner)?;
    let schedules: Vec<Value> = scheduled
        .schedules
        .iter()
        .map(resources::schedule)
        .chain(scheduled.wakeups.iter().map(resources::wakeup))
        .collect();
    Ok(Json(json!({ "schedules": schedules })))
}

/// `DELETE /v1/schedules/{id}` (a schedule's id is `namespace/name`, a wakeup's `wk_…`).
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let caller = state.auth().caller(&headers)?;
    revoke_as(&state, &caller, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Revokes schedule or wakeup `id` as the caller: one that may write and see its owner.
pub(crate) fn revoke_as(state: &AppState, caller: &Caller, id: &str) -> ApiResult<()> {
    caller.require_write()?;
    let triggers = state.triggers();
    let owner = triggers.schedule_owner(id)?;
    if !caller.may_see(&owner) {
        return Err(ApiError::not_found(format!("not found: schedule `{id}`")));
    }
    triggers.revoke_schedule(id)?;
    Ok(())
}
