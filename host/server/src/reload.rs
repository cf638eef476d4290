//! Hot reload of the config dir (CONTRACT §7): a changed manifest or component is loaded,
//! validated and compiled aside, then swapped in atomically; calls in flight finish on the old
//! version. A change that fails keeps the last good version running and shows the error in
//! the log and `GET /v1/status`. Every host-config field applies at a reload (models and
//! their keys, tokens, settings, sources, policy, mount, condensation) except where the host
//! listens and keeps its data and the size of its Wasm instance pool (`policy.max_instances`,
//! `policy.instance_wait`): a change of those is logged and listed in `/v1/status` as needing
//! a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agentmesh_engine::{Plan, check_components};
use agentmesh_manifest::model::host::HostConfig;
use agentmesh_store::now_rfc3339;
use serde_json::{Value, json};

use crate::metrics::Metrics;
use crate::{AppState, Auth, tokens_of};

/// GitHub's own cap on webhook payloads, the default `max_body_bytes`.
const DEFAULT_MAX_BODY: u64 = 25 * 1024 * 1024;

/// The default `max_body_memory`: ten bodies of GitHub's largest kind at once, or one of them
/// with its JSON of ordinary density.
const DEFAULT_BODY_MEMORY: u64 = 256 * 1024 * 1024;

/// The largest request body `host` accepts.
pub fn max_body_of(host: &HostConfig) -> usize {
    let bytes = host.policy.max_body_bytes.map_or(DEFAULT_MAX_BODY, |b| b.0);
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// How much memory the request bodies `host` handles may take together (see `memory`).
pub(crate) fn body_memory_of(host: &HostConfig) -> usize {
    let bytes = host
        .policy
        .max_body_memory
        .map_or(DEFAULT_BODY_MEMORY, |b| b.0);
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The outcome of the last reload.
#[derive(Debug, Default, Clone)]
pub struct ReloadStatus {
    /// Successful reloads since start.
    pub generation: u64,
    /// When the configuration in force was loaded.
    pub loaded_at: Option<String>,
    /// The last failed attempt: when, and why (the last good version is still in force).
    pub last_error: Option<(String, String)>,
    /// Host-config fields changed since start that apply only at a restart.
    pub restart_required: Vec<&'static str>,
}

impl ReloadStatus {
    /// As JSON for `/v1/status`.
    pub fn to_json(&self) -> Value {
        json!({
            "generation": self.generation,
            "loaded_at": self.loaded_at,
            "last_error": self.last_error.as_ref().map(|(at, message)| json!({"at": at, "message": message})),
            "restart_required": self.restart_required,
        })
    }
}

/// The host-config fields a running host cannot change (where it listens, where its data
/// and its store live, the bounds on its connections, how large its instance pool is), as the config names
/// them; every other field applies at a reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartOnly(Vec<(&'static str, Option<String>)>);

impl StartOnly {
    /// Those fields of `host`.
    pub fn of(host: &HostConfig) -> Self {
        let policy = &host.policy;
        StartOnly(vec![
            ("listen", host.listen.clone()),
            ("data_dir", host.data_dir.clone()),
            (
                "store",
                host.store
                    .as_ref()
                    .map(|s| format!("{:?} {:?} {:?}", s.backend, s.url, s.pool)),
            ),
            (
                "policy.max_connections",
                policy.max_connections.map(|n| n.to_string()),
            ),
            (
                "policy.header_timeout",
                policy.header_timeout.map(|d| d.to_string()),
            ),
            (
                "policy.body_timeout",
                policy.body_timeout.map(|d| d.to_string()),
            ),
            (
                "policy.idle_timeout",
                policy.idle_timeout.map(|d| d.to_string()),
            ),
            (
                "policy.mcp_session_idle",
                policy.mcp_session_idle.map(|d| d.to_string()),
            ),
            // The instance pool is reserved when the plugin host starts.
            (
                "policy.max_instances",
                policy.max_instances.map(|n| n.to_string()),
            ),
            (
                "policy.instance_wait",
                policy.instance_wait.map(|d| d.to_string()),
            ),
        ])
    }

    /// The fields whose value in `now` differs from this one's.
    fn changed_in(&self, now: &StartOnly) -> Vec<&'static str> {
        self.0
            .iter()
            .zip(&now.0)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0)
            .collect()
    }
}

/// What identifies the state of the files a configuration is made of: each file's path,
/// size and modification time.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The manifests under `dir` (hidden directories skipped: the data dir often lives there) and
/// the components the plan in force names (they may live outside `dir`).
fn fingerprint(dir: &Path, components: &[PathBuf]) -> Fingerprint {
    let mut files = Vec::new();
    collect(dir, &mut files, 0);
    files.extend(components.iter().cloned());
    files.sort();
    files.dedup();
    files
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).ok();
            let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
            let modified = meta.and_then(|m| m.modified().ok());
            (p, len, modified)
        })
        .collect()
}

/// Directories deeper than this are not watched (a symlink loop cannot hang the watcher).
const MAX_DEPTH: usize = 16;

fn collect(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect(&path, out, depth + 1);
        } else if [".yaml", ".yml", ".wasm"].iter().any(|e| name.ends_with(e)) {
            out.push(path);
        }
    }
}

fn component_paths(state: &AppState) -> Vec<PathBuf> {
    state
        .engine()
        .plan()
        .components()
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

/// Watches the config dir every `interval` and reloads when its files change. Runs until the
/// task is dropped. The files are looked at when this is called, not when the task first
/// runs: a change made once the server answers is never taken for the config it started with.
pub fn watch(state: Arc<AppState>, interval: Duration) -> impl Future<Output = ()> {
    let dir = state.config_dir.clone();
    let mut last = fingerprint(&dir, &component_paths(&state));
    async move {
        loop {
            tokio::time::sleep(interval).await;
            let now = fingerprint(&dir, &component_paths(&state));
            if now == last {
                continue;
            }
            // Let a writer finish: reload once the files stop changing for a moment.
            tokio::time::sleep(interval / 2).await;
            let settled = fingerprint(&dir, &component_paths(&state));
            if settled != now {
                continue;
            }
            last = settled;
            if reload(&state).await.is_ok() {
                // The new plan may name other component files.
                last = fingerprint(&dir, &component_paths(&state));
            }
        }
    }
}

/// Loads, validates and compiles the config dir aside and swaps it in; on failure keeps the
/// version in force and records why.
async fn reload(state: &AppState) -> Result<(), String> {
    let dir = state.config_dir.clone();
    let cache = state.engine().component_cache().map(Path::to_path_buf);
    let outcome = async {
        // Off the runtime: building the plan may fetch `openapi` documents.
        let plan = tokio::task::spawn_blocking(move || {
            let mut report = agentmesh_manifest::validate(&dir);
            check_components(&mut report, cache.as_deref(), false);
            if report.has_errors() {
                let lines: Vec<String> =
                    report.diagnostics.iter().map(ToString::to_string).collect();
                return Err(lines.join("\n"));
            }
            let env = |n: &str| std::env::var(n).ok();
            Plan::build(&report.config, &env).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| format!("validation did not finish: {e}"))??;
        let env = |n: &str| std::env::var(n).ok();
        let auth = Auth::new(tokens_of(&plan.host, &env).map_err(|e| e.to_string())?);
        if auth.is_open() && !state.bound.ip().is_loopback() {
            return Err(format!(
                "the config has no `api_tokens`, but the host listens on {}: a non-loopback \
                 address requires them",
                state.bound
            ));
        }
        let max_body = max_body_of(&plan.host);
        let body_memory = body_memory_of(&plan.host);
        let restart = state.at_start.changed_in(&StartOnly::of(&plan.host));
        state
            .engine()
            .reload(plan)
            .await
            .map_err(|e| e.to_string())?;
        state.apply(auth, max_body, body_memory);
        Ok(restart)
    }
    .await;
    let mut status = state
        .reload
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &outcome {
        Ok(restart) => {
            status.generation += 1;
            status.loaded_at = Some(now_rfc3339());
            status.last_error = None;
            for field in restart {
                tracing::warn!(
                    "the host config's `{field}` changed: it applies at the next restart"
                );
            }
            status.restart_required.clone_from(restart);
            Metrics::inc(&state.metrics.reloads_ok);
            tracing::info!(generation = status.generation, "configuration reloaded");
        }
        Err(e) => {
            status.last_error = Some((now_rfc3339(), e.clone()));
            Metrics::inc(&state.metrics.reloads_failed);
            tracing::warn!("reload failed; the last good configuration stays in force:\n{e}");
        }
    }
    outcome.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_bounds_are_named_as_needing_a_restart() {
        let before = HostConfig::default();
        let mut after = HostConfig::default();
        after.policy.idle_timeout = Some(agentmesh_manifest::model::common::Duration(
            std::time::Duration::from_secs(5),
        ));
        after.policy.max_connections = Some(10);
        let changed = StartOnly::of(&before).changed_in(&StartOnly::of(&after));
        assert_eq!(changed, ["policy.max_connections", "policy.idle_timeout"]);
    }
}
