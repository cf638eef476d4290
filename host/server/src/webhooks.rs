//! `/v1/webhooks/tools/{namespace}/{tool}`: a tool's events from its platform. 202 accepted
//! (also when no task subscribes: counted and logged, not stored) · 200 duplicate delivery · 401 bad or missing signature · 400 not JSON
//! · 413 too large · 404 unknown tool. A 2xx is answered only once what was queued is on disk.

use std::sync::Arc;

use agentmesh_engine::WebhookError;
use agentmesh_routing::{Headers, Inbound, WebhookOutcome};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::AppState;
use crate::error::{ApiError, ApiPath, ApiResult, Body};
use crate::metrics::Metrics;

/// A request's headers as the checks below the server take them (they know no HTTP types).
pub(crate) fn headers_of(headers: &HeaderMap) -> Headers {
    headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect()
}

/// `POST /v1/webhooks/tools/{namespace}/{tool}`.
pub async fn tool(
    State(state): State<Arc<AppState>>,
    ApiPath((namespace, tool)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Result<Body, ApiError>,
) -> ApiResult<Response> {
    let metrics = &state.metrics;
    let Body(body) = body.inspect_err(|_| Metrics::inc(&metrics.webhooks_rejected))?;
    let tool_id = format!("{namespace}/{tool}");
    let headers = headers_of(&headers);
    let delivery = Inbound {
        headers: &headers,
        body: &body,
    };
    let outcome = state
        .router()
        .deliver_tool_webhook(&tool_id, delivery)
        .await;
    match outcome {
        Ok(WebhookOutcome::Accepted(tasks)) => {
            Metrics::inc(&metrics.webhooks_accepted);
            metrics
                .webhook_inputs
                .fetch_add(tasks.len() as u64, std::sync::atomic::Ordering::Relaxed);
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"status": "accepted", "tasks": tasks.len()})),
            )
                .into_response())
        }
        Ok(WebhookOutcome::Duplicate) => {
            Metrics::inc(&metrics.webhooks_duplicate);
            Ok((StatusCode::OK, Json(json!({"status": "duplicate"}))).into_response())
        }
        Ok(WebhookOutcome::Unmatched) => {
            Metrics::inc(&metrics.webhooks_unmatched);
            // Accepted, just of no interest to any task: the sender must not retry it.
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"status": "unmatched", "tasks": 0})),
            )
                .into_response())
        }
        Err(e) => Err(refused(metrics, e, &tool_id)),
    }
}

/// The error answer to a refused delivery to `target` (a tool or a source), counted.
pub(crate) fn refused(metrics: &Metrics, error: WebhookError, target: &str) -> ApiError {
    match error {
        WebhookError::UnknownTool(id) => {
            Metrics::inc(&metrics.webhooks_rejected);
            ApiError::not_found(format!("no tool `{id}` with webhook events"))
        }
        WebhookError::UnknownSource(name) => {
            Metrics::inc(&metrics.webhooks_rejected);
            ApiError::not_found(format!("no trigger source `{name}` in the host config"))
        }
        WebhookError::Unauthorized(why) => {
            Metrics::inc(&metrics.webhooks_unauthorized);
            tracing::info!(webhook.target = %target, "delivery refused: {why}");
            ApiError::unauthorized(why)
        }
        WebhookError::NotJson(why) => {
            Metrics::inc(&metrics.webhooks_rejected);
            ApiError::bad_request(format!("the body is not JSON: {why}"))
        }
        WebhookError::Engine(e) => e.into(),
    }
}
