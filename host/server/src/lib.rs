//! The agentmesh HTTP API (CONTRACT §3), axum on hyper 1, over the engine.
//!
//! - `tasks`: `/v1/tasks…` — create, read, list, input, events (JSON or live SSE), interrupt,
//!   delete, reviews; bearer-token auth with the spec's roles (`auth`);
//! - `webhooks`: `/v1/webhooks/tools/{ns}/{tool}` — signature check on the raw bytes,
//!   delivery-id dedupe, routing to subscribed tasks, durable acknowledgement;
//! - `triggers`: `/v1/webhooks/sources/{source}`, `/v1/triggers…` (API fire, status) and
//!   `/v1/schedules…` (schedules and self-scheduled wakeups; revocation);
//! - `status`: `/v1/status`, `/healthz`, `/metrics` (Prometheus text);
//! - `reload`: watches the config dir and swaps in a changed configuration atomically,
//!   keeping the last good one when a change does not validate;
//! - `scrub`: every answer's body, SSE frames included, with the secrets replaced.
//!
//! [`AppState`] holds what handlers share; [`router`] builds the routes and [`serve`] runs
//! them until a shutdown signal, then drains in-flight requests.

mod auth;
mod error;
mod metrics;
pub mod reload;
mod scrub;
mod status;
mod tasks;
mod triggers;
mod webhooks;

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentmesh_engine::Engine;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use tokio::sync::broadcast;

pub use auth::{Auth, Role, Token};
pub use error::ApiError;
pub use metrics::Metrics;

/// What the handlers share.
pub struct AppState {
    engine: Engine,
    /// Who may call the task API.
    pub auth: Auth,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Task ids whose log grew (for live event streams).
    pub appended: broadcast::Sender<Arc<str>>,
    /// The config dir being served.
    pub config_dir: PathBuf,
    /// The largest request body accepted.
    pub max_body_bytes: usize,
    /// The outcome of the last reload of the config dir.
    pub reload: Mutex<reload::ReloadStatus>,
}

impl AppState {
    /// State over `engine`; hooks the store's appends to the live event streams.
    pub fn new(engine: Engine, auth: Auth, config_dir: PathBuf, max_body_bytes: usize) -> Self {
        let (appended, _) = broadcast::channel(1024);
        let sender = appended.clone();
        engine.store().set_append_hook(Box::new(move |task| {
            // Nobody listening is fine: streams re-read the log when they subscribe.
            let _ = sender.send(Arc::from(task));
        }));
        AppState {
            engine,
            auth,
            metrics: Metrics::default(),
            appended,
            config_dir,
            max_body_bytes,
            reload: Mutex::new(reload::ReloadStatus::default()),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// Every route of CONTRACT §3.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route("/v1/tasks", post(tasks::create).get(tasks::list))
        .route("/v1/tasks/{id}", get(tasks::get).delete(tasks::delete))
        .route("/v1/tasks/{id}/input", post(tasks::input))
        .route("/v1/tasks/{id}/events", get(tasks::events))
        .route("/v1/tasks/{id}/interrupt", post(tasks::interrupt))
        .route("/v1/tasks/{id}/reviews/{review_id}", post(tasks::review))
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
        .route("/v1/status", get(status::status))
        .route("/healthz", get(status::healthz))
        .route("/metrics", get(status::metrics))
        .fallback(status::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            scrub::answers,
        ))
        .with_state(state)
}

/// Serves `router(state)` on `listener` until `shutdown` completes, then stops accepting and
/// lets requests in flight finish.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
