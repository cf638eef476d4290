//! `/v1/status`, `/healthz`, `/metrics`, and the JSON 404.

use std::sync::Arc;

use agentmesh_engine::sources::SourceKind;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Role;
use crate::error::{ApiError, ApiResult};

/// `GET /v1/status`: loaded resources, component versions, what the pollers and the MCP event
/// sessions are doing, the last reload's outcome. A poller is known by the values its tasks'
/// bindings sealed, which may be any owner's (and its errors quote its request): an
/// `agent_user`, who sees only the tasks it owns, is not shown pollers.
pub async fn status(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let caller = state.auth().caller(&headers)?;
    let sees_pollers = caller.role != Role::AgentUser;
    let engine = state.engine();
    let plan = engine.plan();
    let mut agents: Vec<&String> = plan.agents.keys().collect();
    agents.sort();
    let mut tools: Vec<&String> = plan.tools.keys().collect();
    tools.sort();
    let components: Vec<Value> = engine
        .component_versions()
        .into_iter()
        .map(|(name, path, hash)| json!({"name": name, "path": path, "hash": hash}))
        .collect();
    let event_sources: Vec<Value> = engine
        .event_sources()
        .list()
        .into_iter()
        .filter(|s| sees_pollers || s.kind != SourceKind::Poll)
        .map(|s| {
            let (failed_at, error) = s.last_error.map_or((None, None), |(at, why)| {
                (Some(agentmesh_engine::task::rfc3339(at)), Some(why))
            });
            json!({
                "kind": s.kind.as_str(),
                "id": s.id,
                "last_ok_at": s.last_ok_ms.map(agentmesh_engine::task::rfc3339),
                "last_error_at": failed_at,
                "last_error": error,
                "failures": s.failures,
            })
        })
        .collect();
    let reload = state
        .reload
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .to_json();
    Ok(Json(json!({
        "config_dir": state.config_dir,
        "agents": agents,
        "tools": tools,
        "components": components,
        "event_sources": event_sources,
        "reload": reload,
    })))
}

/// `GET /healthz`: `ok`, or 503 naming why while the store cannot write.
pub async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.health.check() {
        Ok(()) => "ok".into_response(),
        Err(why) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the store cannot write: {why}"),
        )
        .into_response(),
    }
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<impl IntoResponse> {
    state.auth().caller(&headers)?;
    let mut body = state.metrics.render(state.engine().pool_metrics().as_ref());
    state.body_memory.render(&mut body);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body))
}

/// Any other path.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}
