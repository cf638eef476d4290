//! `/mcp`: an agent's functions served over MCP (streamable HTTP), behind the API's bearer
//! tokens. Each MCP session is a task of the agent `?agent=ns/name` names, owned by the
//! token's subject; a `read_only` token cannot open one.
//!
//! Every request is checked here before the MCP transport sees it, with the configuration in
//! force (a reload applies at once): the caller, the agent and, for a request in a session,
//! that the session is the caller's own — a session id held by anyone else answers 404, so
//! no other token can read, stream or close it. The body is read within the API's size cap
//! and body timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentmesh_engine::UserRef;
use agentmesh_mcp::{SessionOf, Sessions};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tower::ServiceExt;

use crate::AppState;
use crate::error::{ApiError, ApiQuery, ApiResult, read_body};

/// The header naming a request's MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// How long an MCP session may go unused, unless `policy.mcp_session_idle` says otherwise.
pub(crate) const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(5 * 60);

/// The owner of each open MCP session, by session id.
#[derive(Default)]
pub struct Owners(Mutex<HashMap<String, SessionOf>>);

impl Owners {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionOf>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether session `id` is `of`'s.
    fn owned_by(&self, id: &str, of: &SessionOf) -> bool {
        self.lock().get(id) == Some(of)
    }

    /// Records a new session, forgetting those `sessions` closed.
    fn opened(&self, id: String, of: SessionOf, sessions: &Sessions) {
        let mut owners = self.lock();
        owners.retain(|id, _| sessions.is_open(id));
        owners.insert(id, of);
    }

    fn closed(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// `/mcp`'s query.
#[derive(Deserialize)]
pub struct AgentQuery {
    agent: Option<String>,
}

/// Any method on `/mcp`: the checks above, then the MCP transport.
pub async fn route(
    State(state): State<Arc<AppState>>,
    ApiQuery(query): ApiQuery<AgentQuery>,
    request: Request,
) -> ApiResult<Response> {
    let caller = state.auth().caller(request.headers())?;
    caller.require_write()?;
    let agent = query
        .agent
        .ok_or_else(|| ApiError::bad_request("name the agent to serve: `/mcp?agent=ns/name`"))?;
    state.engine().agent(&agent)?;
    let of = SessionOf {
        agent,
        user: UserRef {
            id: caller.subject,
            email: None,
        },
    };
    let session = request
        .headers()
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && !state.mcp_owners.owned_by(id, &of)
    {
        return Err(ApiError::not_found("no such MCP session"));
    }
    let (mut parts, body) = request.into_parts();
    let body = read_body(body, &state).await?;
    parts.extensions.insert(of.clone());
    let request = Request::from_parts(parts, axum::body::Body::from(body));
    let method = request.method().clone();
    let served = state.mcp.service.clone().oneshot(request).await;
    // The MCP service answers every request itself (its errors are JSON-RPC errors).
    let mut response = match served {
        Ok(response) => response,
        Err(never) => match never {},
    };
    match &session {
        None => {
            if let Some(id) = response.headers().get(SESSION_ID)
                && let Ok(id) = id.to_str()
            {
                state
                    .mcp_owners
                    .opened(id.to_owned(), of, &state.mcp.sessions);
            }
        }
        Some(id) if response.status() == StatusCode::NOT_FOUND => state.mcp_owners.closed(id),
        Some(id) if method == Method::DELETE && response.status().is_success() => {
            state.mcp_owners.closed(id);
            // A closed session has nothing more to say: 204, which clients expect, not 202.
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        Some(_) => {}
    }
    Ok(response.map(axum::body::Body::new).into_response())
}
