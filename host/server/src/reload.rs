//! Hot reload of the config dir (CONTRACT §7): a changed manifest or component is loaded,
//! validated and compiled aside, then swapped in atomically; calls in flight finish on the old
//! version. A change that fails keeps the last good version running and shows the error in
//! the log and `GET /v1/status`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agentmesh_engine::{Plan, check_components};
use agentmesh_store::now_rfc3339;
use serde_json::{Value, json};

use crate::AppState;
use crate::metrics::Metrics;

/// The outcome of the last reload.
#[derive(Debug, Default, Clone)]
pub struct ReloadStatus {
    /// Successful reloads since start.
    pub generation: u64,
    /// When the configuration in force was loaded.
    pub loaded_at: Option<String>,
    /// The last failed attempt: when, and why (the last good version is still in force).
    pub last_error: Option<(String, String)>,
}

impl ReloadStatus {
    /// As JSON for `/v1/status`.
    pub fn to_json(&self) -> Value {
        json!({
            "generation": self.generation,
            "loaded_at": self.loaded_at,
            "last_error": self.last_error.as_ref().map(|(at, message)| json!({"at": at, "message": message})),
        })
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
/// task is dropped.
pub async fn watch(state: Arc<AppState>, interval: Duration) {
    let dir = state.config_dir.clone();
    let mut last = fingerprint(&dir, &component_paths(&state));
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

/// Loads, validates and compiles the config dir aside and swaps it in; on failure keeps the
/// version in force and records why.
pub async fn reload(state: &AppState) -> Result<(), String> {
    let dir = state.config_dir.clone();
    let cache = state.engine().component_cache().map(Path::to_path_buf);
    let outcome = async {
        let report = tokio::task::spawn_blocking(move || {
            let mut report = agentmesh_manifest::validate(&dir);
            check_components(&mut report, cache.as_deref(), false);
            report
        })
        .await
        .map_err(|e| format!("validation did not finish: {e}"))?;
        if report.has_errors() {
            let lines: Vec<String> = report.diagnostics.iter().map(ToString::to_string).collect();
            return Err(lines.join("\n"));
        }
        let env = |n: &str| std::env::var(n).ok();
        let plan = Plan::build(&report.config, &env).map_err(|e| e.to_string())?;
        state.engine().reload(plan).await
    }
    .await;
    let mut status = state
        .reload
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &outcome {
        Ok(()) => {
            status.generation += 1;
            status.loaded_at = Some(now_rfc3339());
            status.last_error = None;
            Metrics::inc(&state.metrics.reloads_ok);
            tracing::info!(generation = status.generation, "configuration reloaded");
        }
        Err(e) => {
            status.last_error = Some((now_rfc3339(), e.clone()));
            Metrics::inc(&state.metrics.reloads_failed);
            tracing::warn!("reload failed; the last good configuration stays in force:\n{e}");
        }
    }
    outcome
}
