//! The agentmesh HTTP API (CONTRACT §3), axum on hyper 1, over the engine.
//!
//! - `tasks`: `/v1/tasks…` — create, read, list, input, events (JSON or live SSE), interrupt,
//!   delete, review decisions, and `/v1/reviews` (the pending reviews a caller may decide);
//!   bearer-token auth with the spec's roles (`auth`);
//! - `webhooks`: `/v1/webhooks/tools/{ns}/{tool}` — signature check on the raw bytes,
//!   delivery-id dedupe, routing to subscribed tasks, durable acknowledgement;
//! - `triggers`: `/v1/webhooks/sources/{source}`, `/v1/triggers…` (API fire, status) and
//!   `/v1/schedules…` (schedules and self-scheduled wakeups; revocation);
//! - `mcp`: `/mcp` — the agent `?agent=` names served over MCP (streamable HTTP), one task
//!   per MCP session, behind the same tokens;
//! - `status`: `/v1/status`, `/healthz`, `/metrics` (Prometheus text);
//! - `health`: a probe of the store on threads of its own; `/healthz` answers 503 while the
//!   store cannot write, and the host exits for a restart when that lasts;
//! - `reload`: watches the config dir and swaps in a changed configuration atomically,
//!   keeping the last good one when a change does not validate;
//! - [`resources`]: the JSON of tasks, reviews, triggers, schedules and wakeups, made from
//!   the engine's records;
//! - [`inspector`]: `/ui/` — the web inspector: server-rendered views of tasks, reviews,
//!   triggers and schedules, plugins and config, behind the same tokens (a session cookie)
//!   with CSRF-checked forms and a strict Content-Security-Policy;
//! - `loopback`: a host without tokens answers only its own machine's callers (a loopback
//!   `Host` and `Origin`), against DNS rebinding and cross-site requests;
//! - `scrub`: every answer's body, SSE frames included, with the secrets replaced;
//! - `connections`: the accept loop, with a cap on connections, header, body and idle
//!   timeouts, and JSON answers for oversized heads;
//! - `memory`: the bound on what request bodies being handled take together, each counted
//!   with the JSON it parses into;
//! - `error`: [`ApiError`] and the one place engine errors become status codes; `metrics`:
//!   the counters of `/metrics`.
//!
//! [`AppState`] holds what handlers share; [`router`] builds the routes and [`serve`] runs
//! them until a shutdown signal, then drains in-flight requests.

mod auth;
pub mod connections;
mod error;
pub mod health;
pub mod inspector;
mod loopback;
mod mcp;
mod memory;
mod metrics;
pub mod reload;
pub mod resources;
mod scrub;
mod status;
mod tasks;
mod triggers;
mod webhooks;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use agentmesh_engine::Engine;
use agentmesh_routing::EventRouter;
use agentmesh_triggers::Triggers;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, delete, get, post};
use tokio::sync::broadcast;

pub use auth::{Auth, Role, Token, tokens_of};
pub use connections::Limits;
pub use error::ApiError;
pub use metrics::Metrics;

/// What the handlers share.
pub struct AppState {
    engine: Engine,
    /// Inbound tool events, routed to the engine's tasks.
    router: EventRouter,
    /// Trigger sources, API fires, schedules and wakeups.
    triggers: Triggers,
    /// Who may call the task API (replaced when a reload changes `api_tokens`).
    auth: RwLock<Arc<Auth>>,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Task ids whose log grew (for live event streams).
    pub appended: broadcast::Sender<Arc<str>>,
    /// Set once the server drains: live event streams end, so that they do not hold the
    /// drain.
    pub draining: tokio::sync::watch::Sender<bool>,
    /// The config dir being served.
    pub config_dir: PathBuf,
    /// The largest request body accepted (`policy.max_body_bytes`, reloadable).
    max_body_bytes: AtomicUsize,
    /// What the bodies being handled take, and how much they may (`policy.max_body_memory`,
    /// reloadable).
    body_memory: Arc<memory::BodyMemory>,
    /// How long a whole request body may take (`policy.body_timeout`, fixed at start).
    pub body_timeout: Duration,
    /// The address the server listens on.
    pub bound: SocketAddr,
    /// The host-config fields that apply only at start, as they were then.
    pub at_start: reload::StartOnly,
    /// The outcome of the last reload of the config dir.
    pub reload: Mutex<reload::ReloadStatus>,
    /// Whether the store can write (see [`health`]).
    pub health: Arc<health::Health>,
    /// MCP sessions over streamable HTTP (`/mcp`), and what ends their streams when the
    /// server drains.
    mcp: agentmesh_mcp::Http,
    /// Who opened each of them.
    mcp_owners: mcp::Owners,
    /// The inspector's sessions and index of tasks (`/ui/`).
    pub inspector: inspector::Inspector,
}

/// How `serve` runs: what [`AppState`] starts with.
pub struct Serving {
    /// The API's tokens.
    pub auth: Auth,
    /// The config dir served (and watched).
    pub config_dir: PathBuf,
    /// The largest request body accepted.
    pub max_body_bytes: usize,
    /// The connection bounds.
    pub limits: Limits,
    /// The address the server listens on.
    pub bound: SocketAddr,
}

impl AppState {
    /// State over `router`'s engine (which `triggers` fires into too); hooks the store's
    /// appends to the live event streams.
    pub fn new(router: EventRouter, triggers: Triggers, serving: Serving) -> Self {
        let engine = router.engine().clone();
        let (appended, _) = broadcast::channel(1024);
        let sender = appended.clone();
        let inspector = inspector::Inspector::default();
        let index = Arc::clone(&inspector.index);
        engine.store().set_append_hook(Box::new(move |task| {
            let task: Arc<str> = Arc::from(task);
            // Marked before the write's caller goes on, so that a list read after a write
            // (an API answer, another host's notice) holds it.
            index.touch(Arc::clone(&task));
            // Nobody listening is fine: streams re-read the log when they subscribe.
            let _ = sender.send(task);
        }));
        let at_start = reload::StartOnly::of(&engine.plan().host);
        let body_memory = memory::BodyMemory::new(reload::body_memory_of(&engine.plan().host));
        // `/mcp` checks the caller, the `Host` name and the body itself, with the
        // configuration in force (`mcp.rs`).
        let idle = engine.plan().host.policy.mcp_session_idle;
        let mcp = agentmesh_mcp::http_service(
            engine.clone(),
            idle.map_or(mcp::DEFAULT_SESSION_IDLE, |d| d.0),
        );
        // Another host's writes missed while the store's listening session was down: the
        // index reads every task again on its next use.
        let index = Arc::downgrade(&inspector.index);
        engine.on_missed_writes(Box::new(move || {
            if let Some(index) = index.upgrade() {
                index.touch_all();
            }
        }));
        // Kept current from the appends; built by its first view, or here in the background.
        if tokio::runtime::Handle::try_current().is_ok() {
            let index = Arc::clone(&inspector.index);
            let store = engine.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = index.current(store.store()) {
                    tracing::warn!("inspector: cannot index the tasks: {e}");
                }
            });
        }
        AppState {
            engine,
            router,
            triggers,
            auth: RwLock::new(Arc::new(serving.auth)),
            metrics: Metrics::default(),
            appended,
            draining: tokio::sync::watch::Sender::new(false),
            config_dir: serving.config_dir,
            max_body_bytes: AtomicUsize::new(serving.max_body_bytes),
            body_memory,
            body_timeout: serving.limits.body_timeout,
            bound: serving.bound,
            at_start,
            reload: Mutex::new(reload::ReloadStatus::default()),
            health: Arc::default(),
            mcp,
            mcp_owners: mcp::Owners::default(),
            inspector,
        }
    }

    /// Who may call the task API now.
    pub fn auth(&self) -> Arc<Auth> {
        Arc::clone(&self.auth.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The largest request body accepted now.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes.load(Ordering::Relaxed)
    }

    /// Puts a reloaded configuration's tokens and body limits in force.
    pub(crate) fn apply(&self, auth: Auth, max_body_bytes: usize, body_memory: usize) {
        *self.auth.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(auth);
        self.max_body_bytes.store(max_body_bytes, Ordering::Relaxed);
        self.body_memory.set_limit(body_memory);
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The router of inbound tool events.
    pub fn router(&self) -> &EventRouter {
        &self.router
    }

    /// Trigger sources, API fires, schedules and wakeups.
    pub fn triggers(&self) -> &Triggers {
        &self.triggers
    }
}

/// Every route of CONTRACT §3.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/tasks", post(tasks::create).get(tasks::list))
        .route("/v1/tasks/{id}", get(tasks::get).delete(tasks::delete))
        .route("/v1/tasks/{id}/input", post(tasks::input))
        .route("/v1/tasks/{id}/events", get(tasks::events))
        .route("/v1/tasks/{id}/interrupt", post(tasks::interrupt))
        .route("/v1/tasks/{id}/reviews/{review_id}", post(tasks::review))
        .route("/v1/reviews", get(tasks::reviews))
        .route(
            "/v1/webhooks/tools/{namespace}/{tool}",
            post(webhooks::tool),
        )
        .route("/v1/webhooks/sources/{source}", post(triggers::source))
        .route("/v1/triggers", get(triggers::list))
        .route("/v1/triggers/{namespace}/{name}", get(triggers::get))
        .route("/v1/triggers/{namespace}/{name}/fire", post(triggers::fire))
        .route("/v1/schedules", get(triggers::schedules))
        .route("/v1/schedules/{*id}", delete(triggers::revoke))
        .route("/mcp", any(mcp::route))
        .route("/v1/status", get(status::status))
        .route("/healthz", get(status::healthz))
        .route("/metrics", get(status::metrics))
        .merge(inspector::routes())
        .fallback(status::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        // Bodies are limited by the `Body` extractor, by the limit in force.
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            health::refuse_while_failing,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            scrub::answers,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            loopback::only_local_callers,
        ))
        .layer(axum::middleware::from_fn(connections::head_limits))
        .with_state(state)
}

/// Serves `router(state)` on `listener`, within `limits` (see [`connections`]), until
/// `shutdown` completes, then stops accepting and lets requests in flight finish.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let draining = state.draining.clone();
    let mcp_stop = state.mcp.stop.clone();
    let shutdown = async move {
        shutdown.await;
        draining.send_replace(true);
        mcp_stop.stop();
    };
    connections::serve(router(state), listener, limits, shutdown).await;
}
