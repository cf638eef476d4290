//! One module per subcommand.

pub mod events;
pub mod run;
pub mod schema;
pub mod serve;
pub mod validate;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use agentmesh_engine::{Plan, check_components};
use agentmesh_manifest::model::host::HostConfig;

/// The data dir: the flag, else the host config's `data_dir` (relative to the config dir),
/// else `.agentmesh` in the config dir.
pub fn data_dir(flag: Option<&Path>, config_dir: &Path, host: &HostConfig) -> PathBuf {
    match (flag, &host.data_dir) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) => config_dir.join(d),
        (None, None) => config_dir.join(".agentmesh"),
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
    let env = |n: &str| std::env::var(n).ok();
    let plan = Plan::build(&report.config, &env)?;
    Ok(Some((report, plan, data)))
}
