//! Whether the host can still write its store. A thread of its own writes and flushes a small
//! mark every [`Probe::every`]; a probe that fails, or does not return, makes the host
//! unhealthy (`/healthz` answers 503 with the reason). sled does not recover from a failed
//! write in the same process (it keeps answering errors after space is freed), so when the
//! store stays unwritable for [`Probe::exit_after`] the process exits with [`EXIT_STORE`]
//! for a supervisor to restart it: a host never lingers answering errors while it says it is
//! healthy, and a write stuck in the file system cannot hold it up for ever.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentmesh_store::{Backend, Typed};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;

/// The exit code of a host that stopped because its store could not write (EX_TEMPFAIL: a
/// restart may succeed once the cause is gone).
pub const EXIT_STORE: i32 = 75;

/// How the store is watched.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// How often a mark is written.
    pub every: Duration,
    /// How long a probe may take before the store counts as stuck.
    pub stuck_after: Duration,
    /// How long the store may stay unwritable before the host exits.
    pub exit_after: Duration,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            every: Duration::from_secs(1),
            stuck_after: Duration::from_secs(2),
            exit_after: Duration::from_secs(8),
        }
    }
}

/// The store's health as the last probes saw it.
#[derive(Debug, Default)]
pub struct Health {
    state: Mutex<Probed>,
    /// Whether `state.failing` is set: every request reads it, the lock only while failing.
    failing: AtomicBool,
}

#[derive(Debug, Default)]
struct Probed {
    /// When the running probe started, if one is running.
    probing_since: Option<Instant>,
    /// Since when, and why, the store cannot write (`None`: it can).
    failing: Option<(Instant, String)>,
}

/// Why the store cannot write now (a failed or stuck probe).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unhealthy(String);

impl Health {
    /// `Err(why)` while the store cannot write (a failed or stuck probe).
    pub fn check(&self) -> Result<(), Unhealthy> {
        if !self.failing.load(Ordering::Acquire) {
            return Ok(());
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &state.failing {
            Some((_, why)) => Err(Unhealthy(why.clone())),
            None => Ok(()),
        }
    }

    fn start_probe(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.probing_since = Some(Instant::now());
    }

    fn end_probe(&self, outcome: Result<(), String>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.probing_since = None;
        match outcome {
            Ok(()) => {
                if state.failing.take().is_some() {
                    tracing::info!("the store writes again");
                }
            }
            Err(why) => {
                state.failing.get_or_insert_with(|| (Instant::now(), why));
            }
        }
        self.failing
            .store(state.failing.is_some(), Ordering::Release);
    }

    /// Marks a probe running longer than `stuck_after` as a failure; returns for how long the
    /// store has been failing, and why.
    fn failing_for(&self, stuck_after: Duration) -> Option<(Duration, String)> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(since) = state.probing_since
            && since.elapsed() > stuck_after
            && state.failing.is_none()
        {
            let why = format!("a store write has not returned for {stuck_after:?}");
            state.failing = Some((since, why));
            self.failing.store(true, Ordering::Release);
        }
        state
            .failing
            .as_ref()
            .map(|(since, why)| (since.elapsed(), why.clone()))
    }
}

/// Starts the probe and its watchdog on threads of their own (a stuck write blocks only the
/// probe's thread). The watchdog exits the process once the store has failed for
/// `probe.exit_after`.
pub fn watch(store: Arc<dyn Backend>, health: Arc<Health>, probe: Probe) -> std::io::Result<()> {
    let prober = Arc::clone(&health);
    std::thread::Builder::new()
        .name("store-probe".into())
        .spawn(move || {
            loop {
                prober.start_probe();
                let outcome = store.probe_durably().map_err(|e| e.to_string());
                if let Err(why) = &outcome {
                    tracing::error!("the store cannot write: {why}");
                }
                prober.end_probe(outcome);
                std::thread::sleep(probe.every);
            }
        })?;
    std::thread::Builder::new()
        .name("store-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(probe.every / 2);
                if let Some((failing, why)) = health.failing_for(probe.stuck_after)
                    && failing >= probe.exit_after
                {
                    tracing::error!(
                        "the store has not been able to write for {failing:?} ({why}); exiting \
                         with code {EXIT_STORE} so that a supervisor restarts the host"
                    );
                    eprintln!("agentmesh: the store cannot write ({why}); exiting");
                    std::process::exit(EXIT_STORE);
                }
            }
        })?;
    Ok(())
}

/// While the store cannot write, answers every request that may write with the store's 503
/// at once, instead of letting it wait on the store; `/healthz`, `/metrics` and `/v1/status`
/// still answer.
pub async fn refuse_while_failing(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let watched = ["/healthz", "/metrics", "/v1/status"].contains(&request.uri().path());
    match state.health.check() {
        Err(why) if !watched => ApiError::store_unavailable(why).into_response(),
        _ => next.run(request).await,
    }
}
