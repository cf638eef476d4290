//! One module per subcommand.

pub mod api;
pub mod call;
pub mod events;
pub mod mcp;
pub mod new;
pub mod review;
pub mod run;
pub mod schema;
pub mod serve;
pub mod store;
pub mod tasks;
pub mod validate;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use agentmesh_engine::{Engine, EngineOptions, Plan, check_components};
use agentmesh_manifest::Diagnostic;
use agentmesh_manifest::model::host::HostConfig;
use agentmesh_manifest::yaml::Pos;
use agentmesh_secrets::SharedSecrets;
use anyhow::Context;

/// The data dir: the flag, else the host config's `data_dir` (relative to the config dir),
/// else `.agentmesh` in the config dir.
pub fn data_dir(flag: Option<&Path>, config_dir: &Path, host: &HostConfig) -> PathBuf {
    match (flag, &host.data_dir) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) => config_dir.join(d),
        (None, None) => config_dir.join(".agentmesh"),
    }
}

/// The compiled-component cache: `AGENTMESH_CACHE_DIR` when set; `components` in the data dir
/// when one is given (the flag `data`, or the host config's `data_dir`); else the user's cache
/// directory (`$XDG_CACHE_HOME/agentmesh/components`, else `$HOME/.cache/agentmesh/components`),
/// which `validate`, `run`, `serve`, `mcp` and `call` of every config share, so that a component
/// compiles once per content hash on this machine (without a home: the data dir's).
pub fn component_cache(data: Option<&Path>, config_dir: &Path, host: &HostConfig) -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("AGENTMESH_CACHE_DIR") {
        return dir;
    }
    let own = || data_dir(data, config_dir, host).join("components");
    if data.is_some() || host.data_dir.is_some() {
        return own();
    }
    match (var("XDG_CACHE_HOME"), var("HOME")) {
        (Some(cache), _) => cache.join("agentmesh/components"),
        (None, Some(home)) => home.join(".cache/agentmesh/components"),
        (None, None) => own(),
    }
}

/// Where a command keeps things: the data dir (store, mounts) and the compiled-component cache.
pub struct Dirs {
    /// The data dir.
    pub data: PathBuf,
    /// The [`component_cache`].
    pub cache: PathBuf,
}

/// An engine of `plan` in this process, on the store in `data`, for a command whose tasks
/// nobody else can reach (`run`, `mcp`): a review is denied at once, and the wakeup tools
/// keep their wakeups for the next host that serves (none fires here). Returns the async
/// runtime to drive it on.
pub fn in_process(
    plan: Plan,
    dirs: &Dirs,
    secrets: &SharedSecrets,
) -> anyhow::Result<(tokio::runtime::Runtime, Engine)> {
    let data = &dirs.data;
    let store = open_store(&plan.host, data)?;
    let options = EngineOptions {
        mount_root: data.join("mounts"),
        component_cache: Some(dirs.cache.clone()),
        review_timeout: Some(std::time::Duration::ZERO),
        secrets: secrets.clone(),
        ..EngineOptions::default()
    };
    let runtime = agentmesh_engine::async_runtime(&plan.host.policy)?;
    let lease = lease_of(&plan.host);
    let engine = Engine::new(plan, store, options);
    agentmesh_triggers::Triggers::new(engine.clone())?;
    // On a shared store, this process is a host among the others while it runs.
    let hosting = engine.clone();
    runtime.spawn(async move { hosting.serve_hosts(lease).await });
    Ok((runtime, engine))
}

/// How long a host on a shared store keeps its tasks when not heard from (the host config's
/// `store.lease`).
pub fn lease_of(host: &HostConfig) -> std::time::Duration {
    host.store
        .as_ref()
        .and_then(|s| s.lease)
        .map_or(agentmesh_store::postgres::DEFAULT_LEASE, |d| d.0)
}

/// Where `tasks` and `events` read: a store no host serves, or a running host's API.
#[derive(clap::Args)]
pub struct ReadFrom {
    /// The data dir of a store no host serves (default: `.agentmesh`, as `run` in the current
    /// directory uses).
    #[arg(long, conflicts_with = "server")]
    pub data: Option<PathBuf>,
    /// A running host's base URL (`http://127.0.0.1:8080`), read through its API with the
    /// token in `AGENTMESH_TOKEN`.
    #[arg(long)]
    pub server: Option<String>,
}

impl ReadFrom {
    /// The data dir: `--data`, else `.agentmesh`.
    pub fn data_dir(&self) -> PathBuf {
        self.data
            .clone()
            .unwrap_or_else(|| PathBuf::from(".agentmesh"))
    }
}

/// The host's store: the host config's `store` (a PostgreSQL database, which other hosts may
/// share), else sled in `data`.
pub fn open_store(
    host: &HostConfig,
    data: &Path,
) -> anyhow::Result<std::sync::Arc<dyn agentmesh_store::Backend>> {
    match postgres_options(host) {
        Some(options) => agentmesh_store::postgres::open(&options)
            .map_err(|e| anyhow::anyhow!("opening the store (PostgreSQL): {e}")),
        None => agentmesh_store::open(data)
            .with_context(|| format!("opening the store in {}", data.display())),
    }
}

/// The PostgreSQL store the host config names, if it names one (`validate` has checked that
/// it has a URL).
pub fn postgres_options(host: &HostConfig) -> Option<agentmesh_store::PgOptions> {
    use agentmesh_manifest::model::host::StoreBackend;
    let store = host.store.as_ref()?;
    (store.backend == StoreBackend::Postgres).then(|| agentmesh_store::PgOptions {
        url: store.url.clone().unwrap_or_default(),
        pool: store.pool.unwrap_or(16) as usize,
        lease: lease_of(host),
    })
}

/// The user named on the command line (`--user`); `user:NAME@DOMAIN` gives an email too.
pub fn user_ref(id: &str) -> agentmesh_engine::UserRef {
    agentmesh_engine::UserRef {
        id: id.to_owned(),
        email: id
            .strip_prefix("user:")
            .filter(|u| u.contains('@'))
            .map(str::to_owned),
    }
}

/// Loads and validates `dir` — compiling its components into the [`component_cache`] — and
/// compiles it into a plan; the data dir is the flag `data`, else as [`data_dir`] says.
/// Returns the report, the plan and the [`Dirs`]; `Ok(None)` after printing the diagnostics
/// when it is invalid (the caller exits 1).
pub fn load(
    dir: &Path,
    data: Option<&Path>,
) -> anyhow::Result<Option<(agentmesh_manifest::Report, Plan, Dirs)>> {
    let mut report = agentmesh_manifest::validate(dir);
    let (config_dir, host) = (report.config.base_dir(), report.config.host_config());
    let dirs = Dirs {
        data: data_dir(data, &config_dir, &host),
        cache: component_cache(data, &config_dir, &host),
    };
    if !report.has_errors() {
        let progress = std::io::stderr().is_terminal();
        check_components(&mut report, Some(&dirs.cache), progress);
    }
    if report.has_errors() {
        for d in &report.diagnostics {
            eprintln!("{d}");
        }
        return Ok(None);
    }
    let Some(plan) = compile(&mut report) else {
        for d in &report.diagnostics {
            eprintln!("{d}");
        }
        return Ok(None);
    };
    Ok(Some((report, plan, dirs)))
}

/// Compiles a report's config (free of errors) into the plan the host runs, with this
/// process's environment; a failure is added to the report as an error of the config dir.
pub fn compile(report: &mut agentmesh_manifest::Report) -> Option<Plan> {
    let env = |n: &str| std::env::var(n).ok();
    match Plan::build(&report.config, &env) {
        Ok(plan) => Some(plan),
        Err(agentmesh_engine::EngineError::Manifest(d)) => {
            report.add_diagnostics([d]);
            None
        }
        Err(e) => {
            report.diagnostics.push(Diagnostic::error(
                report.config.base_dir(),
                Pos::default(),
                format!("the config does not compile: {e}"),
            ));
            None
        }
    }
}
