//! Wasm components in tasks: tool sessions (Initialize on a task's first call of the tool,
//! Invoke per call, Teardown when the task ends), middleware steps, and plugin key-value in
//! the store.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentmesh_manifest::model::host::Policy;
use agentmesh_manifest::model::tool::WasmRuntime;
use agentmesh_manifest::{Diagnostic, Report};
use agentmesh_plugins::{
    KvError, KvScope, KvStore, Limits, LoadedComponent, MemoryKv, MiddlewareCall,
    MiddlewareVerdict, MountDir, PluginConfig, PluginError, PluginHost, PoolMetrics, Sandbox,
    ToolSession,
};
use agentmesh_secrets::SharedSecrets;
use agentmesh_store::Backend;
use serde_json::Value;

use crate::lock;
use crate::runtime::ActionResult;

/// Compiles every component `report` references — reading or filling the compiled cache in
/// `cache_dir` — and checks that each implements the world its reference needs (a tool's
/// `wasm.component` a `tool-plugin` component, a middleware step a `middleware-plugin`
/// component, a webhook's `filter_component` an `event-filter-plugin` component). Each problem
/// becomes an error at the reference. With `progress`, names each component on stderr as it
/// loads it (compiling takes a while; a cached one loads in milliseconds). Returns how many
/// component files loaded, and how many of those came from the cache.
pub fn check_components(
    report: &mut Report,
    cache_dir: Option<&Path>,
    progress: bool,
) -> ComponentsLoaded {
    let mut loaded = ComponentsLoaded::default();
    if report.components.is_empty() {
        return loaded;
    }
    let config = PluginConfig {
        cache_dir: cache_dir.map(Path::to_path_buf),
        max_instances: 1,
        ..PluginConfig::default()
    };
    let host = PluginHost::new(config, Arc::new(MemoryKv::new())).map_err(|e| e.to_string());
    let mut outcomes: HashMap<PathBuf, Result<&'static str, String>> = HashMap::new();
    let mut found = Vec::new();
    for reference in &report.components {
        let outcome = outcomes.entry(reference.path.clone()).or_insert_with(|| {
            if progress {
                eprintln!("loading component {}", reference.written);
            }
            let host = host
                .as_ref()
                .map_err(|e| format!("cannot be checked: {e}"))?;
            host.load(&reference.path)
                .map(|c| {
                    loaded.files += 1;
                    loaded.from_cache += usize::from(c.from_cache());
                    c.world().as_str()
                })
                .map_err(|e| {
                    // The reference names the file: say the rest (`is not a valid …`).
                    let text = e.to_string();
                    let path = reference.path.display().to_string();
                    match text.strip_prefix(&path) {
                        Some(rest) => rest.trim_start().to_owned(),
                        None => format!("cannot be loaded: {text}"),
                    }
                })
        });
        let needed = reference.world.wit_name();
        let problem = match outcome {
            Ok(world) if *world == needed => continue,
            Ok(world) => format!(
                "component `{}` implements `{world}`; here it must implement `{needed}`",
                reference.written
            ),
            Err(e) => format!("component `{}` {e}", reference.written),
        };
        found.push(Diagnostic::error(&reference.file, reference.pos, problem));
    }
    report.add_diagnostics(found);
    loaded
}

/// What [`check_components`] loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComponentsLoaded {
    /// Component files loaded (each once, however many references name it).
    pub files: usize,
    /// Those read from the compiled cache rather than compiled.
    pub from_cache: usize,
}

/// The multi-threaded tokio runtime a host runs on. Its blocking threads are tokio's usual 512
/// plus one per Wasm instance of `policy`'s pool: a guest call that runs long holds one of them
/// (it leaves the async workers, see `agentmesh_plugins`), and so can every instance at once.
pub fn async_runtime(policy: &Policy) -> std::io::Result<tokio::runtime::Runtime> {
    runtime_builder(policy).build()
}

/// The builder of [`async_runtime`] (and of the turn pool's).
pub(crate) fn runtime_builder(policy: &Policy) -> tokio::runtime::Builder {
    let instances = policy
        .max_instances
        .unwrap_or(PluginConfig::default().max_instances);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .max_blocking_threads(512 + instances as usize);
    builder
}

/// Plugin key-value in the store, one scope per (component, task).
struct StoreKv(Arc<dyn Backend>);

fn scope_key(scope: &KvScope) -> String {
    // Task ids never contain `/`, so `component/task` is unambiguous from the right.
    format!("{}/{}", scope.component, scope.task)
}

impl KvStore for StoreKv {
    fn get(&self, scope: &KvScope, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.0
            .kv_value(&scope_key(scope), key)
            .map_err(|e| KvError(e.to_string()))
    }

    fn set(&self, scope: &KvScope, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.0
            .kv_put_buffered(&scope_key(scope), key, value)
            .map_err(|e| KvError(e.to_string()))
    }

    fn delete(&self, scope: &KvScope, key: &str) -> Result<(), KvError> {
        self.0
            .kv_delete_buffered(&scope_key(scope), key)
            .map_err(|e| KvError(e.to_string()))
    }
}

/// A tool session: the task, and the tool with the runtime block the action runs (component
/// and sandbox) and the mount it sees. Actions of a tool share a session when their blocks and
/// mounts are the same; an action with a sandbox of its own (say, its own `allowed_hosts`)
/// gets its own instance, since an instance's sandbox is fixed when it is opened. So does a
/// call after a reload changed either: the session it had is not the sandbox in force.
type SessionKey = (String, String);

/// The second half of a [`SessionKey`].
fn session_of(tool: &str, runtime: &WasmRuntime, mount: Option<&MountDir>) -> String {
    let block = serde_json::to_string(runtime).unwrap_or_default();
    match mount {
        Some(dir) => format!("{tool} {block} {}", dir.shown().display()),
        None => format!("{tool} {block}"),
    }
}

/// Whether `session` runs `component` with `settings` (JSON).
fn same(session: &ToolSession, component: &LoadedComponent, settings: &str) -> bool {
    session.component().hash() == component.hash() && session.settings() == settings
}

/// A component in force: the name it runs as (a tool's id, or a middleware step's or event
/// filter's path) and its file.
type ComponentKey = (String, PathBuf);

/// The engine's plugin host, its loaded components and the open tool sessions.
///
/// A file several tools run is compiled once; each tool gets its own view of it
/// ([`LoadedComponent::named`]), so its errors, logs, counters and key-value scopes carry its
/// own name.
pub(crate) struct Plugins {
    host: PluginHost,
    components: Mutex<HashMap<ComponentKey, Arc<LoadedComponent>>>,
    sessions: Mutex<HashMap<SessionKey, Arc<tokio::sync::Mutex<ToolSession>>>>,
}

impl Plugins {
    /// A plugin host whose compiled components are cached in `cache_dir`, with the instance
    /// pool `policy` sizes (`max_instances`, `instance_wait`); what components print and log
    /// is scrubbed of the `secrets` in force.
    pub(crate) fn new(
        store: Arc<dyn Backend>,
        cache_dir: Option<PathBuf>,
        policy: &Policy,
        secrets: SharedSecrets,
    ) -> Result<Plugins, PluginError> {
        let defaults = PluginConfig::default();
        let config = PluginConfig {
            cache_dir,
            max_instances: policy.max_instances.unwrap_or(defaults.max_instances),
            instance_wait: policy.instance_wait.map_or(defaults.instance_wait, |d| d.0),
            secrets,
            ..defaults
        };
        Ok(Plugins {
            host: PluginHost::new(config, Arc::new(StoreKv(store)))?,
            components: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// The component at `path` as `name`: the version in force, else a view of the version in
    /// force of the same file under another name, else loaded now (each file once per
    /// engine).
    pub(crate) fn component(
        &self,
        name: &str,
        path: &Path,
    ) -> Result<Arc<LoadedComponent>, PluginError> {
        let key = (name.to_owned(), path.to_path_buf());
        {
            let mut components = lock(&self.components);
            if let Some(c) = components.get(&key) {
                return Ok(Arc::clone(c));
            }
            if let Some(c) = components.values().find(|c| c.path() == path) {
                let view = Arc::new(c.named(name));
                components.insert(key, Arc::clone(&view));
                return Ok(view);
            }
        }
        let loaded = self.host.load_named(name, path)?;
        lock(&self.components).insert(key, Arc::clone(&loaded));
        Ok(loaded)
    }

    /// Loads (compiles, or reads from the compiled cache) each file of `components` once,
    /// and makes a view of it for each name it runs as, without installing any: the first
    /// failure names its component.
    pub(crate) fn preload(
        &self,
        components: &[ComponentKey],
    ) -> Result<HashMap<ComponentKey, Arc<LoadedComponent>>, String> {
        let mut files: HashMap<&Path, Arc<LoadedComponent>> = HashMap::new();
        let mut loaded = HashMap::new();
        for (name, path) in components {
            let component = match files.get(path.as_path()) {
                Some(file) => Arc::new(file.named(name)),
                None => {
                    let file = self
                        .host
                        .load_named(name, path)
                        .map_err(|e| format!("component `{}`: {e}", path.display()))?;
                    files.insert(path, Arc::clone(&file));
                    file
                }
            };
            loaded.insert((name.clone(), path.clone()), component);
        }
        Ok(loaded)
    }

    /// Makes `components` the versions in force. Calls in flight finish on the version they
    /// started with; a tool session on a replaced version is reopened at its next call.
    pub(crate) fn install(&self, components: HashMap<ComponentKey, Arc<LoadedComponent>>) {
        *lock(&self.components) = components;
    }

    /// The instance pool's size and each component's instances and calls.
    pub(crate) fn pool_metrics(&self) -> PoolMetrics {
        self.host.pool_metrics()
    }

    /// The components in force, with their world and where their code came from.
    pub(crate) fn loaded(&self) -> Vec<crate::inspect::LoadedDetail> {
        let mut out: Vec<_> = lock(&self.components)
            .iter()
            .map(|((name, path), c)| crate::inspect::LoadedDetail {
                name: name.clone(),
                path: path.clone(),
                hash: c.hash().to_owned(),
                world: c.world().as_str(),
                from_cache: c.from_cache(),
            })
            .collect();
        out.sort_by(|a, b| (&a.name, &a.path).cmp(&(&b.name, &b.path)));
        out
    }

    /// Hits and misses of the compiled-component cache since the host started.
    pub(crate) fn cache_stats(&self) -> agentmesh_plugins::CacheStats {
        self.host.cache_stats()
    }

    /// The components in force: name, path and content hash.
    pub(crate) fn versions(&self) -> Vec<(String, PathBuf, String)> {
        let mut out: Vec<_> = lock(&self.components)
            .iter()
            .map(|((name, path), c)| (name.clone(), path.clone(), c.hash().to_owned()))
            .collect();
        out.sort();
        out
    }

    /// Invokes `action` of the tool's component in the task's session, opening it first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn invoke(
        &self,
        task: &str,
        tool: &str,
        path: &Path,
        runtime: &WasmRuntime,
        mount: Option<MountDir>,
        settings: &Value,
        parameters: &Value,
        action: &str,
        input: &Value,
    ) -> ActionResult {
        let key = (task.to_owned(), session_of(tool, runtime, mount.as_ref()));
        let component = match self.component(tool, path) {
            Ok(c) => c,
            Err(e) => {
                return ActionResult::Fatal(format!("component `{}`: {e}", path.display()));
            }
        };
        let existing = lock(&self.sessions).get(&key).cloned();
        let settings = settings.to_string();
        let current = match existing {
            Some(s) if same(&*s.lock().await, &component, &settings) => Some(s),
            Some(stale) => {
                // The component or the tool's settings were replaced (hot reload): Teardown
                // on the old version, then Initialize on the new one with the settings in
                // force (the old ones may be an old secret, which the scrubbing no longer
                // knows).
                lock(&self.sessions).remove(&key);
                if let Ok(session) = Arc::try_unwrap(stale).map(tokio::sync::Mutex::into_inner)
                    && let Err(e) = session.close().await
                {
                    tracing::warn!(
                        task.id = task,
                        tool.name = tool,
                        "tool session teardown failed: {e}"
                    );
                }
                None
            }
            None => None,
        };
        let session = match current {
            Some(s) => s,
            None => {
                let sandbox = match Sandbox::from_runtime(runtime, mount) {
                    Ok(s) => s,
                    Err(e) => return ActionResult::Fatal(e.to_string()),
                };
                // Opened (Initialize) by its first call, which reports what that met.
                let opened =
                    ToolSession::lazy(component, sandbox, &settings, &parameters.to_string(), task);
                match opened {
                    Ok(s) => {
                        let s = Arc::new(tokio::sync::Mutex::new(s));
                        lock(&self.sessions).insert(key, Arc::clone(&s));
                        s
                    }
                    Err(e) => return fault(&e),
                }
            }
        };
        let mut session = session.lock().await;
        match session.invoke(action, &input.to_string()).await {
            Ok(Ok(output)) => {
                ActionResult::Ok(serde_json::from_str(&output).unwrap_or(Value::String(output)))
            }
            Ok(Err(error)) if error.is_fatal() => ActionResult::Fatal(error.to_string()),
            Ok(Err(error)) => ActionResult::Recoverable(error.to_string()),
            Err(e) => fault(&e),
        }
    }

    /// Runs a middleware component's `before` (no `output`) or `after` step.
    /// `limits`: the step's `memory_limit` (bytes) and `timeout`, each the plugin host's
    /// default when absent.
    pub(crate) async fn middleware(
        &self,
        path: &Path,
        (memory, timeout): (Option<u64>, Option<std::time::Duration>),
        call: &MiddlewareCall<'_>,
        output: Option<&str>,
    ) -> Result<MiddlewareVerdict, String> {
        let name = path.display().to_string();
        let component = self.component(&name, path).map_err(|e| e.to_string())?;
        let defaults = Limits::default();
        let limits = Limits {
            memory: memory.unwrap_or(defaults.memory),
            timeout: timeout.unwrap_or(defaults.timeout),
            ..defaults
        };
        let verdict = match output {
            None => component.middleware_before(&limits, call).await,
            Some(o) => component.middleware_after(&limits, call, o).await,
        };
        verdict.map_err(|e| e.to_string())
    }

    /// Tears down every session of `task` (when it ends).
    pub(crate) async fn close_task(&self, task: &str) {
        let sessions: Vec<_> = {
            let mut all = lock(&self.sessions);
            let keys: Vec<SessionKey> = all.keys().filter(|(t, _)| t == task).cloned().collect();
            keys.into_iter().filter_map(|k| all.remove(&k)).collect()
        };
        for s in sessions {
            if let Ok(session) = Arc::try_unwrap(s).map(tokio::sync::Mutex::into_inner)
                && let Err(e) = session.close().await
            {
                tracing::warn!(task.id = task, "tool session teardown failed: {e}");
            }
        }
    }

    /// Tears down every open session.
    pub(crate) async fn close_all(&self) {
        let tasks: Vec<String> = lock(&self.sessions)
            .keys()
            .map(|(t, _)| t.clone())
            .collect();
        for t in tasks {
            self.close_task(&t).await;
        }
    }
}

/// A guest fault (trap, panic, timeout, memory, oversized output) or a full instance pool is
/// a recoverable error for the LLM; a host failure ends the task.
fn fault(e: &PluginError) -> ActionResult {
    if e.is_guest_fault() {
        ActionResult::Recoverable(e.to_string())
    } else {
        ActionResult::Fatal(e.to_string())
    }
}
