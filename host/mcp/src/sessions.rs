//! The sessions of [`http_service`](crate::http_service): rmcp's [`LocalSessionManager`]
//! with the host's idle expiry instead of its own.
//!
//! rmcp closes a session after its `keep_alive` without an event of the session, and a call
//! that waits (for a review, say) is no event: a call waiting longer than that lost its
//! session, its answer and its task. Here a session is closed only when it has been idle for
//! the limit — no request for that long, and no answer or stream of it open (a call in
//! flight, a client's open `GET`). Expiry is checked when a request names the session (an
//! expired one is closed, and the request answered 404 as for any unknown session) and when
//! a session is opened (every expired one is closed then), so idle sessions cost nothing
//! between requests and never pile up.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};

/// How a session has been used.
#[derive(Debug, Clone, Copy)]
struct Use {
    /// Its last request, or the end of its last answer or stream.
    last: Instant,
    /// Its answers and streams open now.
    open: usize,
}

/// The open sessions (see the module docs); shared by the service and the server in front,
/// which asks [`Sessions::is_open`].
pub struct Sessions {
    inner: LocalSessionManager,
    idle: Duration,
    used: Arc<Mutex<HashMap<SessionId, Use>>>,
}

impl Sessions {
    /// Sessions closed after `idle` without use.
    pub(crate) fn new(idle: Duration) -> Sessions {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = None;
        Sessions {
            inner,
            idle,
            used: Arc::default(),
        }
    }

    fn used(&self) -> MutexGuard<'_, HashMap<SessionId, Use>> {
        lock(&self.used)
    }

    /// Whether session `id` is open and not expired.
    pub fn is_open(&self, id: &str) -> bool {
        self.used().get(id).is_some_and(|u| !expired(u, self.idle))
    }

    /// Marks a request of session `id` now; `false` (and the session closed) when it expired
    /// or is unknown.
    async fn touch(&self, id: &SessionId) -> bool {
        let live = match self.used().get_mut(id) {
            Some(u) if !expired(u, self.idle) => {
                u.last = Instant::now();
                true
            }
            _ => false,
        };
        if !live {
            self.close(id).await;
        }
        live
    }

    /// Closes session `id` (logged when the transport fails to).
    async fn close(&self, id: &SessionId) {
        self.used().remove(id);
        if let Err(e) = self.inner.close_session(id).await {
            tracing::warn!(mcp.session = %id, "closing an MCP session failed: {e}");
        }
    }

    /// `stream`, counting as session `id`'s use while it is open.
    fn held<S>(&self, id: &SessionId, stream: S) -> Held<S> {
        if let Some(u) = self.used().get_mut(id) {
            u.open += 1;
            u.last = Instant::now();
        }
        Held {
            stream,
            id: id.clone(),
            used: Arc::clone(&self.used),
        }
    }
}

/// Whether a session used as `u` has been idle for `idle`.
fn expired(u: &Use, idle: Duration) -> bool {
    u.open == 0 && u.last.elapsed() >= idle
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A stream of a session's answers, counted as its use until dropped.
struct Held<S> {
    stream: S,
    id: SessionId,
    used: Arc<Mutex<HashMap<SessionId, Use>>>,
}

impl<S: Stream + Unpin> Stream for Held<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        Pin::new(&mut self.stream).poll_next(cx)
    }
}

impl<S> Drop for Held<S> {
    fn drop(&mut self) {
        if let Some(u) = lock(&self.used).get_mut(&self.id) {
            u.open = u.open.saturating_sub(1);
            u.last = Instant::now();
        }
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let expired: Vec<SessionId> = self
            .used()
            .iter()
            .filter(|(_, u)| expired(u, self.idle))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            tracing::debug!(mcp.session = %id, "closing an MCP session idle for too long");
            self.close(id).await;
        }
        let (id, transport) = self.inner.create_session().await?;
        let fresh = Use {
            last: Instant::now(),
            open: 0,
        };
        self.used().insert(id.clone(), fresh);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id).await;
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.touch(id).await && self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.used().remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(self.held(id, Box::pin(stream)))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(self.held(id, Box::pin(stream)))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(self.held(id, Box::pin(stream)))
    }
}
