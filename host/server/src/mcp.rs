//! `/mcp`: an agent's functions served over MCP (streamable HTTP), behind the API's bearer
//! tokens. Each MCP session is a task of the agent `?agent=ns/name` names, owned by the
//! token's subject; a `read_only` token cannot open one, and a session answers only the
//! subject that opened it.

use std::sync::Arc;

use agentmesh_engine::UserRef;
use agentmesh_mcp::SessionOf;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tower::ServiceExt;

use crate::AppState;
use crate::error::{ApiError, ApiQuery, ApiResult};

/// `/mcp`'s query.
#[derive(Deserialize)]
pub struct AgentQuery {
    agent: Option<String>,
}

/// Any method on `/mcp`: the caller and the agent checked, then the MCP transport.
pub async fn route(
    State(state): State<Arc<AppState>>,
    ApiQuery(query): ApiQuery<AgentQuery>,
    mut request: Request,
) -> ApiResult<Response> {
    let caller = state.auth().caller(request.headers())?;
    caller.require_write()?;
    let agent = query
        .agent
        .ok_or_else(|| ApiError::bad_request("name the agent to serve: `/mcp?agent=ns/name`"))?;
    state.engine().agent(&agent)?;
    request.extensions_mut().insert(SessionOf {
        agent,
        user: UserRef {
            id: caller.subject,
            email: None,
        },
    });
    let closing = request.method() == Method::DELETE;
    let served = state.mcp.clone().oneshot(request).await;
    // The MCP service answers every request itself (its errors are JSON-RPC errors).
    let mut response = match served {
        Ok(response) => response,
        Err(never) => match never {},
    };
    // A closed session has nothing more to say: 204, which clients expect, not 202.
    if closing && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    Ok(response.map(axum::body::Body::new).into_response())
}
