//! One module per subcommand.

pub mod call;
pub mod events;
pub mod mcp;
pub mod run;
pub mod schema;
pub mod serve;
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

/// An engine of `plan` in this process, on the store in `data`, for a command whose tasks
/// nobody else can reach (`run`, `mcp`): a review is denied at once, and the wakeup tools
/// keep their wakeups for the next host that serves (none fires here). Returns the async
/// runtime to drive it on.
pub fn in_process(
    plan: Plan,
    data: &Path,
    secrets: &SharedSecrets,
) -> anyhow::Result<(tokio::runtime::Runtime, Engine)> {
    let store = agentmesh_store::open(data)
        .with_context(|| format!("opening the store in {}", data.display()))?;
    let options = EngineOptions {
        mount_root: data.join("mounts"),
        component_cache: Some(data.join("components")),
        review_timeout: Some(std::time::Duration::ZERO),
        secrets: secrets.clone(),
        ..EngineOptions::default()
    };
    let runtime = agentmesh_engine::async_runtime(&plan.host.policy)?;
    let engine = Engine::new(plan, store, options);
    agentmesh_triggers::Triggers::new(engine.clone())?;
    Ok((runtime, engine))
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

/// Loads and validates `dir` — compiling its components into the cache of the data dir (the
/// flag `data`, else as [`data_dir`] says) — and compiles it into a plan. Returns the report,
/// the plan and the data dir; `Ok(None)` after printing the diagnostics when it is invalid
/// (the caller exits 1).
pub fn load(
    dir: &Path,
    data: Option<&Path>,
) -> anyhow::Result<Option<(agentmesh_manifest::Report, Plan, PathBuf)>> {
    let mut report = agentmesh_manifest::validate(dir);
    let data = data_dir(
        data,
        &report.config.base_dir(),
        &report.config.host_config(),
    );
    if !report.has_errors() {
        let progress = std::io::stderr().is_terminal();
        check_components(&mut report, Some(&data.join("components")), progress);
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
    Ok(Some((report, plan, data)))
}

/// Compiles a report's config (free of errors) into the plan the host runs, with this
/// process's environment; a failure is added to the report as an error of the config dir.
pub fn compile(report: &mut agentmesh_manifest::Report) -> Option<Plan> {
    let env = |n: &str| std::env::var(n).ok();
    match Plan::build(&report.config, &env) {
        Ok(plan) => Some(plan),
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
