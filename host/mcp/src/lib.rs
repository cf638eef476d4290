//! An agent's functions served over MCP, so that the MCP clients people already use can call
//! the host's sandboxed tools.
//!
//! - [`AgentServer`] answers one MCP session: `initialize` opens a task of the agent for the
//!   session's user ([`Engine::open_session`]), whose id the answer's `_meta` carries as [`TASK_META`]; `tools/list` lists the agent's functions as
//!   its LLM sees them (names, descriptions, input schemas with bound parameters hidden);
//!   `tools/call` runs one as the LLM's calls run ([`Engine::call_direct`]: bindings, the
//!   capability's steps, allow lists, limits, the event log); the end of the session ends
//!   the task ([`Engine::close_session`]).
//! - [`serve_stdio`] serves one session on stdin/stdout (`agentmesh mcp`); [`http_service`]
//!   serves sessions over streamable HTTP (`serve`'s `/mcp`, behind its bearer tokens: the
//!   server puts the caller's [`SessionOf`] into each request); [`Sessions`] closes an HTTP
//!   session once it is idle (no request, and no call or stream of it open).
//!
//! The protocol revisions served are those with sessions (up to 2025-11-25): a session is
//! what a task is made for. A client that prefers the session-less 2026-07-28 revision falls
//! back to `initialize` (the Python SDK's `auto` mode does).

mod server;
mod sessions;

use std::sync::Arc;
use std::time::Duration;

use agentmesh_engine::{Engine, EngineError, UserRef};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

pub use server::{AgentServer, TASK_META};
pub use sessions::Sessions;

/// Whose session it is: the agent served and the user its task runs for. Over HTTP the
/// server puts it into each request's extensions after checking the bearer token.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionOf {
    /// The agent, `namespace/name`.
    pub agent: String,
    /// Who the task runs for.
    pub user: UserRef,
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The transport failed (stdin/stdout closed mid-message, a malformed handshake).
    #[error("MCP transport: {0}")]
    Transport(String),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Serves one MCP session of `of` on stdin/stdout until the client closes stdin; its task
/// then ends. A client that closes stdin before `initialize` leaves nothing behind.
pub async fn serve_stdio(engine: Engine, of: SessionOf) -> Result<(), McpError> {
    engine.agent(&of.agent)?;
    let server = AgentServer::new(engine.clone(), Some(of));
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::info!("the MCP client left before the session opened: {e}");
            return Ok(());
        }
    };
    let task = running.service().task();
    let ended = running.waiting().await;
    if let Some(id) = task {
        engine.close_session(&id).await?;
    }
    ended
        .map(|_| ())
        .map_err(|e| McpError::Transport(e.to_string()))
}

/// The streamable-HTTP MCP service of [`http_service`].
pub type HttpService = StreamableHttpService<AgentServer, Sessions>;

/// Ends every stream of an [`http_service`] (a client's open GET, an answer being streamed),
/// so that a server draining for its exit is not held by them.
#[derive(Clone, Debug)]
pub struct HttpStop(CancellationToken);

impl HttpStop {
    /// Ends the streams; sessions and calls are left to end as the server does.
    pub fn stop(&self) {
        self.0.cancel();
    }
}

/// What [`http_service`] makes: the service, what ends its streams, and its sessions.
pub struct Http {
    /// The MCP transport.
    pub service: HttpService,
    /// Ends its streams.
    pub stop: HttpStop,
    /// Its sessions, for the server in front to ask which are open.
    pub sessions: Arc<Sessions>,
}

/// Serves MCP sessions over streamable HTTP; each request must carry a [`SessionOf`] in its
/// extensions (the caller). The server in front checks the caller, the session's owner, the
/// `Host` name and the body's size and time, with its configuration in force: this service
/// checks none of them. A session idle for `idle` (no request, no answer or stream open) is
/// closed, and its task ends ([`Sessions`]).
pub fn http_service(engine: Engine, idle: Duration) -> Http {
    let stop = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_cancellation_token(stop.clone());
    // Answers as JSON unless the call sends something before its result.
    config.json_response = true;
    // The body arrives read already, within the server's cap in force.
    config.max_request_body_bytes = usize::MAX;
    let sessions = Arc::new(Sessions::new(idle));
    let service = StreamableHttpService::new(
        move || Ok(AgentServer::new(engine.clone(), None)),
        Arc::clone(&sessions),
        config,
    );
    Http {
        service,
        stop: HttpStop(stop),
        sessions,
    }
}
