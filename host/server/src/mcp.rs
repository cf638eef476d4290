//! `/mcp`: an agent's functions served over MCP (streamable HTTP), behind the API's bearer
//! tokens. Each MCP session is a task of the agent `?agent=ns/name` names, owned by the
//! token's subject; a `read_only` token cannot open one.
//!
//! Every request is checked here before the MCP transport sees it, with the configuration in
//! force (a reload applies at once): the caller, the agent and, for a request in a session,
//! that the session is the caller's own — a session id held by anyone else answers 404, so
//! no other token can read, stream or close it; and that a caller opening a session holds
//! fewer than `policy.mcp_sessions_per_caller` (429 otherwise). The body is read within the API's size cap
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

/// How many `/mcp` sessions one caller may hold open, unless `policy.mcp_sessions_per_caller`
/// says otherwise.
pub(crate) const DEFAULT_SESSIONS_PER_CALLER: u32 = 32;

/// The owner of each open MCP session, by session id, and the sessions being opened.
#[derive(Default)]
pub struct Owners(Mutex<OwnersInner>);

#[derive(Default)]
struct OwnersInner {
    owners: HashMap<String, SessionOf>,
    /// Per subject, the `initialize` requests on their way through the transport.
    opening: HashMap<String, u32>,
}

/// A place for one new session of a subject, held while its `initialize` is answered; given
/// back when dropped.
struct Opening<'a> {
    owners: &'a Owners,
    subject: String,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut inner = self.owners.lock();
        if let Some(n) = inner.opening.get_mut(&self.subject) {
            *n -= 1;
            if *n == 0 {
                inner.opening.remove(&self.subject);
            }
        }
    }
}

impl Owners {
    fn lock(&self) -> std::sync::MutexGuard<'_, OwnersInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether session `id` is `of`'s.
    fn owned_by(&self, id: &str, of: &SessionOf) -> bool {
        self.lock().owners.get(id) == Some(of)
    }

    /// A place for a new session of `subject`, if it holds fewer than `max` (open in
    /// `sessions`, or being opened).
    fn open(&self, subject: &str, max: u32, sessions: &Sessions) -> Option<Opening<'_>> {
        let mut inner = self.lock();
        inner.owners.retain(|id, _| sessions.is_open(id));
        let open = inner
            .owners
            .values()
            .filter(|of| of.user.id == subject)
            .count();
        let opening = inner.opening.entry(subject.to_owned()).or_default();
        if u32::try_from(open)
            .unwrap_or(u32::MAX)
            .saturating_add(*opening)
            >= max
        {
            if *opening == 0 {
                inner.opening.remove(subject);
            }
            return None;
        }
        *opening += 1;
        Some(Opening {
            owners: self,
            subject: subject.to_owned(),
        })
    }

    /// Records a new session, in the place `opening` held.
    fn opened(&self, id: String, of: SessionOf, opening: Opening<'_>) {
        self.lock().owners.insert(id, of);
        drop(opening);
    }

    fn closed(&self, id: &str) {
        self.lock().owners.remove(id);
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
    // A POST outside a session may open one (an `initialize`): it takes one of the caller's
    // places first.
    let opening = match &session {
        Some(_) => None,
        None if request.method() != Method::POST => None,
        None => {
            let max = state
                .engine()
                .plan()
                .host
                .policy
                .mcp_sessions_per_caller
                .unwrap_or(DEFAULT_SESSIONS_PER_CALLER)
                .max(1);
            let place = state.mcp_owners.open(&of.user.id, max, &state.mcp.sessions);
            Some(place.ok_or_else(|| {
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_sessions",
                    format!(
                        "`{}` holds {max} open MCP sessions, the most one caller may \
                         (policy.mcp_sessions_per_caller): close one (DELETE /mcp with its \
                         Mcp-Session-Id) or let one go idle",
                        of.user.id
                    ),
                )
            })?)
        }
    };
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
    match (&session, opening) {
        (None, Some(opening)) => {
            if let Some(id) = response.headers().get(SESSION_ID)
                && let Ok(id) = id.to_str()
            {
                state.mcp_owners.opened(id.to_owned(), of, opening);
            }
        }
        (Some(id), _) if response.status() == StatusCode::NOT_FOUND => state.mcp_owners.closed(id),
        (Some(id), _) if method == Method::DELETE && response.status().is_success() => {
            state.mcp_owners.closed(id);
            // A closed session has nothing more to say: 204, which clients expect, not 202.
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        _ => {}
    }
    Ok(response.map(axum::body::Body::new).into_response())
}
